"""The plugin example `examples/acme_plugin/` installs into a fresh venv, registers
its discover/execute pair through the `cronjobs.handlers` entry point, passes its own
tests, runs, is "module not installed" (and not scheduled) while its `available()` is
False, and uninstalls cleanly: its old rows stay readable, its pending rows fail with a
clear "no handler" error.

Fast and offline: the fresh venv has no pip and reaches cronjobs and its dependencies
(hatchling, the plugin's build backend, included) through a `.pth` file that adds this
venv's site-packages; this venv's pip installs into it (`pip --python`) with no index,
no dependencies and no build isolation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import ROOT

PLUGIN = ROOT / "examples" / "acme_plugin"
TYPES = ("acme.diskusage.discover", "acme.diskusage.execute")
NO_HANDLER = "no handler registered for type 'acme.diskusage.execute'"


@pytest.fixture
def fresh(tmp_path) -> Path:
    """A new venv (no pip) that sees this venv's packages; returns its python."""
    venv.EnvBuilder(with_pip=False).create(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True).stdout
    outer = sysconfig.get_paths()["purelib"]
    Path(purelib.strip(), "_cronjobs_outer.pth").write_text(
        f"import site; site.addsitedir({outer!r})\n")
    return python


def pip(python: Path, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *args,
                          "--no-input", "--disable-pip-version-check", "-q"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr


def test_plugin_installs_registers_runs_and_uninstalls(fresh, tmp_path):
    work = tmp_path / "work"
    measured = tmp_path / "measured"
    (measured / "sub").mkdir(parents=True)
    (measured / "a.log").write_bytes(b"a" * 1200)
    (measured / "sub" / "b.log").write_bytes(b"b" * 34)
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CRONJOBS_", "ACME_", "PYTHON"))}
    env.update(CRONJOBS_DATABASE_URL=f"sqlite:///{work / 'cj.db'}", CRONJOBS_LOG_LEVEL="WARNING")
    # Rows of unknown types are put back for a grace period before they fail (rolling
    # deploys); with the grace at 0 they fail at once, as asserted below.
    env["CRONJOBS_UNKNOWN_TYPE_GRACE_SECONDS"] = "0"

    def cli(*args: str, code: int = 0, **extra: str) -> str:
        out = subprocess.run([str(fresh), "-m", "cronjobs", *args], env={**env, **extra},
                             cwd=work, capture_output=True, text=True, timeout=120)
        assert out.returncode == code, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr, out.stderr
        return out.stdout

    pip(fresh, "install", "--no-deps", "--no-build-isolation", "--no-index", str(PLUGIN))

    # 1. registered, with its source; unavailable until configured: not scheduled
    listing = {line.split()[0]: line for line in cli("list-handlers").splitlines()[1:]}
    for job_type in TYPES:
        assert "entry point acme (acme_cronjobs:register_handlers)" in listing[job_type]
        assert listing[job_type].rstrip().endswith("module not installed")
    assert "@hourly (0 * * * *)" in listing["acme.diskusage.discover"]
    cli("migrate")
    tasks = {line.split()[0]: line for line in cli("tasks").splitlines()[1:]}
    assert "module not installed" in tasks["acme-diskusage"]
    ticked = cli("tick", "--now", "2026-01-05T12:00:00")
    assert "skipped acme-diskusage: unavailable (module not installed)" in ticked
    assert "started acme-diskusage" not in ticked

    # 2. its own tests pass in the fresh venv
    own = subprocess.run([str(fresh), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                         cwd=PLUGIN, env=env, capture_output=True, text=True, timeout=300)
    assert own.returncode == 0, own.stdout + own.stderr
    assert "5 passed" in own.stdout

    # 3. configured: the next hour's tick starts it; its rows run and store their results
    configured = {"ACME_DISKUSAGE_PATHS": str(measured)}
    ticked = cli("tick", "--now", "2026-01-05T13:00:00", **configured)
    discover_id = int(ticked.split("started acme-diskusage slot 202601051300 as job ")[1]
                      .split()[0])
    assert cli("run", str(discover_id), **configured).startswith(f"job {discover_id} ")
    [child] = json.loads(cli("get", str(discover_id), **configured))["result_payload"]["jobs"]
    cli("run", str(child), **configured)
    done = json.loads(cli("get", str(child), **configured))
    assert done["status"] == "completed"
    assert done["result_payload"] == {"path": str(measured), "files": 2, "bytes": 1234,
                                      "limit_bytes": None}
    pending = [int(cli("dispatch", "acme.diskusage.execute", "--payload",
                       json.dumps({"path": str(measured)}), **configured)) for _ in range(2)]

    # 4. uninstalled: gone from the registry; old rows readable; pending rows fail clearly
    pip(fresh, "uninstall", "-y", "acme-cronjobs")
    assert not any(t in cli("list-handlers") for t in TYPES)
    again = json.loads(cli("get", str(child)))
    assert (again["status"], again["result_payload"]) == ("completed", done["result_payload"])
    assert json.loads(cli("get", str(discover_id)))["status"] == "completed"
    out = cli("run", str(pending[0]), code=1)  # `cronjobs run` on an unknown type
    assert f"job {pending[0]} (acme.diskusage.execute): failed" in out
    # the worker's path: claim the due rows of every queue and run them
    drained = subprocess.run([str(fresh), "-c", "from cronjobs.app import current; "
                              "from cronjobs.testing import drain; print(len(drain(current())))"],
                             env=env, cwd=work, capture_output=True, text=True, timeout=120)
    assert drained.returncode == 0, drained.stderr
    engine = sa.create_engine(env["CRONJOBS_DATABASE_URL"], poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT id, status, error FROM cronjob_queue WHERE id IN ({pending[0]}, {pending[1]}) "
            f"ORDER BY id").all()
    engine.dispose()
    assert [(r[0], r[1]) for r in rows] == [(pending[0], "failed"), (pending[1], "failed")]
    assert all(r[2].startswith(NO_HANDLER) for r in rows), rows
