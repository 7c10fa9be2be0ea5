"""The wheel carries the engine, the built-in handlers, `registry` and the migrations, so
`cronjobs migrate` works from a plain `pip install`; and the dashboard's package data."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

from conftest import ROOT


def test_wheel_contents_and_migrate_from_it(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("cronjobs-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("registry/__init__.py", "handlers/HttpUptimeExecute.py", "cronjobs/queue.py",
                   "cronjobs/_migrations/env.py", "cronjobs/_migrations/versions/0001_initial.py",
                   "handlers/TlsCertExpiryExecute.py",
                   "cronjobs/translations/tr/LC_MESSAGES/handlers.po",
                   # the dashboard's templates, static files and compiled message catalogs
                   "cronjobs/web/templates/job.html", "cronjobs/web/static/style.css",
                   "cronjobs/web/templates/overview.html", "cronjobs/web/static/live.js",
                   "cronjobs/web/translations/tr/LC_MESSAGES/messages.mo"):
        assert needed in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from cronjobs.migrate import migrations_path, upgrade, current;"
            "from cronjobs.store.engines import make_engine;"
            "assert str(migrations_path()).startswith(sys.argv[1]), migrations_path();"
            "e = make_engine('sqlite:///' + sys.argv[1] + '/m.db'); upgrade(e); print(current(e))")
    out = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0018"


def test_make_run_installs_only_what_running_needs(tmp_path):
    """`make run` installs the package alone: pip's plan for it holds none of the test,
    lint, docs or bench tools that `make test` adds."""
    makefile = (ROOT / "Makefile").read_text()
    assert "run: $(RUN_STAMP)" in makefile and 'pip install --quiet -e .\n' in makefile
    plan = tmp_path / "plan.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                    "--ignore-installed", "--report", str(plan), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    names = {i["metadata"]["name"].lower() for i in json.loads(plan.read_text())["install"]}
    assert {"cronjobs", "sqlalchemy", "dramatiq", "flask"} <= names
    assert not names & {"pytest", "playwright", "celery", "mkdocs", "procrastinate", "py-spy",
                        "ruff", "import-linter", "hatchling", "aiosmtpd"}, names
    # the tests' certificate maker; installed, PyMySQL imports it in every process
    assert "cryptography" not in names, names
