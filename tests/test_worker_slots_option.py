"""`cronjobs worker --slots N` runs N jobs at a time; `--threads`, its old name, still works
with a deprecation note; both at once is a usage error (exit 2) that starts nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import cli_env, run_cli
from cronjobs import queue

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@SQLITE
@pytest.mark.parametrize(("flag", "deprecated"), [("--slots", False), ("--threads", True)])
def test_the_slots_option_and_its_old_name(make_app, db_url, tmp_path, flag, deprecated):
    app = make_app()
    job_id = queue.dispatch("test.shape.execute", {"shape": "true"}, app=app)
    env = cli_env(db_url, CRONJOBS_LOG_LEVEL="INFO")
    out = subprocess.run([sys.executable, "-m", "cronjobs", "worker", "--queues", "default",
                          flag, "3", "--max-jobs", "1"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "consuming default with 3 slot(s)" in out.stderr
    assert ("The option 'threads' is deprecated. use --slots" in out.stderr) is deprecated
    assert queue.get(job_id, ["status"], app=app) == {"status": "completed"}


@SQLITE
def test_slots_and_threads_together_are_refused(make_app, db_url, tmp_path):
    make_app()
    for command in ("worker", "serve"):
        out = run_cli([command, "--slots", "2", "--threads", "2"], cli_env(db_url), cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert "give --slots only (--threads is its old name)" in out.stderr
