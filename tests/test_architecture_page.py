"""docs/architecture.md matches the code: its module table names every module of src/ and
no path that is gone, and its diagram of the import layers is the layers contract of
pyproject.toml, layer for layer."""

from __future__ import annotations

import re
import tomllib

from conftest import ROOT

PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
SRC = ROOT / "src"
# Folders whose row may stand for all their files: one handler class per file.
WHOLE_FOLDERS = {"handlers/"}


def _section(title: str) -> str:
    start = PAGE.index(f"\n## {title}\n")
    end = PAGE.find("\n## ", start + 1)
    return PAGE[start:end if end > 0 else None]


def _table_rows() -> list[tuple[list[str], str]]:
    """`(paths in the first column, the whole row)` of each row of the module table."""
    rows = []
    for line in _section("Modules").splitlines():
        if line.startswith("| `"):
            first = line.split(" | ")[0]
            rows.append((re.findall(r"`([^`]+)`", first), line))
    return rows


def _modules() -> list[str]:
    return sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py"))


def _named(module: str, rows: list[tuple[list[str], str]]) -> bool:
    folder, _, name = module.rpartition("/")
    for paths, row in rows:
        if module in paths:
            return True
        if f"{folder}/" in paths and (name == "__init__.py" or f"`{name}`" in row
                                      or f"{folder}/" in WHOLE_FOLDERS):
            return True
    return False


def test_the_module_table_names_every_module_of_src():
    rows = _table_rows()
    modules = _modules()
    assert len(rows) > 20 and len(modules) > 80
    assert [m for m in modules if not _named(m, rows)] == []


def test_every_path_in_the_module_table_exists():
    paths = [p for first, _ in _table_rows() for p in first]
    assert "cronjobs/schedule/tasks.py" in paths
    assert [p for p in paths if not (SRC / p).exists() and not (ROOT / p).exists()] == []


def _drawn_layers() -> list[str]:
    block = _section("Import layers").split("```")[1]
    text = ""
    for line in block.strip("\n").splitlines():
        content = re.sub(r"^(?:[a-z][a-z ]*?\s{2,}|\s+)", "", line)
        text += f" {content}" if content.startswith(">") or not text else f" > {content}"
    return [" ".join(layer.split()) for layer in text.split(">")]


def test_the_layer_diagram_is_the_layers_contract():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers")
    assert contract["containers"] == ["cronjobs"] and contract["exhaustive"]
    assert _drawn_layers() == [" ".join(layer.split()) for layer in contract["layers"]]
