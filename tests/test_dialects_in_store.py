"""Dialect-specific code lives in `cronjobs/store/` only: no module elsewhere in `src/`
branches on the database — a dialect or driver named as a value (`"sqlite"`,
`"mysql+pymysql"`), an engine's `.dialect` or a URL's `get_backend_name()`. Prose (an
error message that says why MariaDB needs a rule) is not a branch."""

from __future__ import annotations

import ast
import re

from conftest import ROOT

SRC = ROOT / "src"
DIALECT = re.compile(r"(sqlite|mysql|mariadb|postgres|postgresql)(\+\w+)?")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _namings(path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if DIALECT.fullmatch(node.value):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value[:40]!r}")
        elif isinstance(node, ast.Attribute) and node.attr in ("dialect", "get_backend_name"):
            found.append(f"{path.relative_to(SRC)}:{node.lineno}: .{node.attr}")
    return found


def test_no_module_outside_the_store_names_a_dialect():
    store = SRC / "cronjobs" / "store"
    files = [p for p in SRC.rglob("*.py") if store not in p.parents]
    assert len(files) > 50
    assert [n for p in files for n in _namings(p)] == []


def test_the_store_does_name_them():
    """The scan finds what it looks for: the store's own modules name every dialect."""
    store = SRC / "cronjobs" / "store"
    text = " ".join(n for p in store.glob("*.py") for n in _namings(p))
    assert all(name in text for name in ("'sqlite'", "'mysql'", "'postgresql'", ".dialect",
                                         ".get_backend_name"))
