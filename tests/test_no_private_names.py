"""No private name of another project or of the standard library in `src/` (an AST scan).

A private name (`_x`, dunder names aside) of a module outside this project is flagged when
it is imported (`from x import _y`, `import x._y`), read as an attribute of a name bound by
an import of such a module (`x._y`, `x.y._z`, `y._z` after `from x import y`), or asked
of one by `getattr`/`setattr`/`hasattr` with a literal name. `os._exit` and
`sys._getframe` are documented public API. A subclass of another module's class must not
override a private method that class has (`def _launch` in a subclass of
`popen_forkserver.Popen`); its own private methods are its business. Names of this
project (`cronjobs`, `handlers`, `registry`, relative imports) and attributes of anything
not bound by an import (`self`, `cls`, local objects) are this project's own business.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.core  # the core subset (make test-core)

SRC = Path(__file__).resolve().parent.parent / "src"
OURS = ("cronjobs", "handlers", "registry")
ALLOWED = {"os._exit", "sys._getframe"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS


class _Scan(ast.NodeVisitor):
    """Collects `(line, text)` of each private name of another module in one file."""

    def __init__(self) -> None:
        self.bound: dict[str, str] = {}  # a name bound by an import -> its dotted origin
        self.found: list[tuple[int, str]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _ours(alias.name):
                continue
            if any(_private(part) for part in alias.name.split(".")):
                self.found.append((node.lineno, f"import {alias.name}"))
            if alias.asname:
                self.bound[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.bound[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or _ours(module):
            return
        if any(_private(part) for part in module.split(".")):
            self.found.append((node.lineno, f"from {module} import ..."))
        for alias in node.names:
            if _private(alias.name):
                self.found.append((node.lineno, f"from {module} import {alias.name}"))
            self.bound[alias.asname or alias.name] = f"{module}.{alias.name}"

    def visit_Attribute(self, node: ast.Attribute) -> None:
        origin = self._origin(node.value)
        if origin is not None and _private(node.attr) \
                and f"{origin}.{node.attr}" not in ALLOWED:
            self.found.append((node.lineno, f"{origin}.{node.attr}"))
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:  # a private method of another module's class, overridden
            origin = self._origin(base)
            if origin is None:
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) \
                        and _private(item.name) and hasattr(_resolve(origin), item.name):
                    self.found.append((item.lineno, f"{origin}.{item.name} overridden"))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and _private(node.args[1].value):
            origin = self._origin(node.args[0])
            if origin is not None:
                self.found.append((node.lineno, f"{node.func.id}({origin}, "
                                                f"{node.args[1].value!r})"))
        self.generic_visit(node)

    def _origin(self, node: ast.expr) -> str | None:
        """The dotted origin of `node` when it is a name bound by an import of another
        module, or a public attribute of one; else None."""
        if isinstance(node, ast.Name):
            return self.bound.get(node.id)
        if isinstance(node, ast.Attribute) and not _private(node.attr):
            origin = self._origin(node.value)
            return None if origin is None else f"{origin}.{node.attr}"
        return None


def _resolve(origin: str) -> object:
    """The object a dotted origin names (its longest importable module, then attributes);
    None when it cannot be found."""
    parts = origin.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name, None)
        return found
    return None


def private_names(source: str) -> list[tuple[int, str]]:
    """`(line, text)` of each private name of another module that `source` uses."""
    scan = _Scan()
    tree = ast.parse(source)
    for node in ast.walk(tree):  # imports first: a lazy import in a function binds too
        if isinstance(node, ast.Import | ast.ImportFrom):
            scan.visit(node)
    scan.found.clear()  # found again below, once, in the walk of the whole tree
    scan.visit(tree)
    return sorted(set(scan.found))


@pytest.mark.parametrize(("source", "expected"), [
    ("from multiprocessing import forkserver\nforkserver._serve_one = f",
     [(2, "multiprocessing.forkserver._serve_one")]),
    ("import multiprocessing.util\nmultiprocessing.util._exit_function()",
     [(2, "multiprocessing.util._exit_function")]),
    ("import pymysql as p\np._auth.x", [(2, "pymysql._auth")]),
    ("from pymysql._auth import sha2_rsa_encrypt", [(1, "from pymysql._auth import ...")]),
    ("from multiprocessing.util import _exit_function",
     [(1, "from multiprocessing.util import _exit_function")]),
    ("def f():\n    x = tracker._fd\n    from multiprocessing import resource_tracker as tracker",
     [(2, "multiprocessing.resource_tracker._fd")]),
    ("import os\ngetattr(os, '_hidden')", [(2, "getattr(os, '_hidden')")]),
    ("import os, sys\nos._exit(0)\nsys._getframe(1)\nos.__name__", []),
    ("self._x = 1\ncls._y\nfrom . import runner\nrunner._SERVER", []),
    ("from cronjobs import runner\nrunner._LOCK\nimport cronjobs.worker.jobprocess\n"
     "cronjobs.worker.jobprocess._PRELOADED", []),
    ("obj = make()\nobj._private", []),
    ("from multiprocessing import popen_forkserver\nclass P(popen_forkserver.Popen):\n"
     "    def _launch(self, obj):\n        self._fds = []\n    def __init__(self):\n"
     "        pass\n    def start(self):\n        pass",
     [(3, "multiprocessing.popen_forkserver.Popen._launch overridden")]),
    ("class Mine(Base):\n    def _helper(self):\n        pass", []),
    ("import threading\nclass T(threading.Thread):\n    def _mine(self):\n        pass", []),
])
def test_the_scan_finds_private_names_of_other_modules_only(source, expected):
    assert private_names(source) == expected


def test_src_uses_no_private_name_of_another_module():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        found += [f"{path.relative_to(SRC)}:{line}: {text}"
                  for line, text in private_names(path.read_text())]
    assert found == [], "private names of other modules:\n" + "\n".join(found)
