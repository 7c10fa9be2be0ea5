"""Every module under src/ stays small (at most 400 lines) and every function short (at most
50 lines, its docstring counted), so each reads at one sitting."""

from __future__ import annotations

import ast

from conftest import ROOT

SRC = ROOT / "src"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50


def _modules() -> list:
    return sorted(SRC.rglob("*.py"))


def test_no_module_is_over_400_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in _modules()}
    assert len(sizes) > 50  # the whole of src/ was read
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_no_function_is_over_50_lines():
    long, seen = {}, 0
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                seen += 1
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert seen > 500  # every function (methods and nested ones too) was measured
    assert long == {}
