"""The documentation cannot drift from the code.

- Every code block marked runnable is run, page by page, in a fresh folder on SQLite:
  `<!-- runnable -->` before a `sh` block (run with bash, `set -e`) or a `python` block
  (run with this venv's python), `<!-- runnable: write PATH -->` before a block whose text
  is written to PATH (a handler file, cronjobs.toml). Blocks of one page share the folder
  and run in order, as a reader would type them.
- The configuration and CLI references are generated (scripts/gen_reference.py) and must
  match what is committed; every setting has a description.
- The MkDocs site (with the API reference from the docstrings) builds offline, strictly.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT
from cronjobs.config import SECTIONS, Settings, TaskSettings, UptimeCheck

DOCS = ROOT / "docs"
BLOCK = re.compile(r"<!-- runnable(?:: write (?P<path>\S+))? -->\n"
                   r"```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)
PAGES = sorted(p for p in DOCS.rglob("*.md") if "<!-- runnable" in p.read_text(encoding="utf-8"))


def blocks(page: Path) -> list[re.Match]:
    text = page.read_text(encoding="utf-8")
    found = list(BLOCK.finditer(text))
    assert len(found) == text.count("<!-- runnable"), f"{page}: a runnable marker without a block"
    return found


def test_the_pages_that_promise_runnable_blocks_have_them():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert {"tutorial.md", "handlers.md"} <= names
    assert sum(len(blocks(p)) for p in PAGES) >= 9


def docs_env(**extra: str) -> dict:
    """A reader's environment: this venv's commands first, no CRONJOBS_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONJOBS_")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["CRONJOBS_LOG_LEVEL"] = "WARNING"
    return {**env, **extra}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_runnable_blocks_run_as_written(page, tmp_path):
    run_blocks(page, tmp_path, docs_env())


def test_the_tutorial_runs_in_a_folder_inside_the_checkout_without_pytest_timeout():
    """A reader whose project folder sits inside a cronjobs checkout (below its
    pyproject.toml, whose pytest settings name pytest-timeout's `timeout`) and whose venv
    has pytest but no pytest-timeout (`-p no:timeout` stands for that venv): every block
    passes, the test step too (the handler folder's own pytest.ini is the rootdir). The
    same page outside the checkout is `test_runnable_blocks_run_as_written[tutorial.md]`;
    both folders are also run with that venv here."""
    env = docs_env(PYTEST_ADDOPTS="-p no:timeout")
    (ROOT / "build").mkdir(exist_ok=True)  # git-ignored
    inside = Path(tempfile.mkdtemp(prefix="tutorial-", dir=ROOT / "build"))
    outside = Path(tempfile.mkdtemp(prefix="tutorial-"))
    try:
        for folder in (inside, outside):
            run_blocks(DOCS / "tutorial.md", folder, env)
            out = subprocess.run([sys.executable, "-m", "pytest", "handlers/test_disk_free.py"],
                                 cwd=folder, env=env, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stdout + out.stderr
            assert f"rootdir: {folder / 'handlers'}" in out.stdout, out.stdout
            assert "configfile: pytest.ini" in out.stdout and "2 passed" in out.stdout
    finally:
        shutil.rmtree(inside, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)


def run_blocks(page: Path, folder: Path, env: dict) -> None:
    """Run the runnable blocks of `page` in `folder`, in order, as a reader would type them."""
    for n, block in enumerate(blocks(page), 1):
        code, where = block["code"], f"{page.name} block {n} ({block['lang']})"
        if block["path"]:
            target = folder / block["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(code, encoding="utf-8")
            continue
        if block["lang"] == "sh":
            args = ["bash", "-euo", "pipefail", "-c", code]
        elif block["lang"] == "python":
            args = [sys.executable, "-c", code]
        else:
            raise AssertionError(f"{where}: cannot run a {block['lang']!r} block")
        out = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, f"{where} failed:\n{code}\n--- stdout\n{out.stdout}" \
                                    f"\n--- stderr\n{out.stderr}"
        assert "Traceback" not in out.stderr, f"{where}:\n{out.stderr}"


def test_reference_pages_match_the_code():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("model", [Settings, TaskSettings, UptimeCheck, *SECTIONS.values()])
def test_every_setting_has_a_description_with_its_unit(model):
    units = {"_seconds": "(seconds)", "_minutes": "(minutes)", "_days": "(days)"}
    for name, field in model.model_fields.items():
        assert field.description and len(field.description) >= 10, f"{model.__name__}.{name}"
        for suffix, unit in units.items():
            if name.endswith(suffix):
                assert unit in field.description, f"{name}: say the unit {unit}"


def test_configuration_reference_lists_every_setting_and_variable():
    page = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    for name in Settings.keys():  # the flat keys, the sections' too (`alert_smtp_to`)
        assert f"| `{name}` |" in page
        if name != "tasks":
            assert f"`CRONJOBS_{name.upper()}`" in page


def test_site_builds_offline_and_strict(tmp_path):
    out = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict",
                          "--quiet", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for text in ("Base class of every handler", "Add a job row and send its id to the broker",
                 "A ready App for a test", "Render `(label, value)` pairs"[:20]):
        assert text.replace("`", "") in re.sub(r"<[^>]+>", "", api), text
    for page in ("tutorial", "handlers", "builtin-handlers", "plugins", "migrating",
                 "operations", "architecture", "reference/configuration", "reference/cli"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_readme_links_to_the_docs_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert {"docs/tutorial.md", "docs/handlers.md", "docs/reference/configuration.md"} <= set(links)
    for link in links:
        assert (ROOT / link).exists(), link
