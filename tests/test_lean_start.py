"""A job process starts lean (`jobprocess.run_process`): it is sent the worker's settings
and runtime, and runs its jobs with the fork server's preloaded App when the settings are
equal (the forked fork server of `cronjobs worker` and the one started fresh after it
retired), its own App when they differ."""

from __future__ import annotations

import json
import os

import pytest

from conftest import REDIS, SAMPLE_HANDLERS
from cronjobs import queue
from test_job_processes_on_demand import _fork_servers
from test_job_slots import CRASH_HANDLERS, MISBEHAVE, Slots, job
from test_worker_e2e import wait_for, worker

pytestmark = pytest.mark.core  # the core subset (make test-core)

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


def _facts(app, job_id: int, proc, log) -> dict:
    wait_for(lambda: queue.get(job_id, ["status"], app=app)["status"] in ("completed", "failed"),
             30, f"job {job_id}", proc, log)
    row = queue.get(job_id, ["status", "result_payload", "error"], app=app)
    assert row["status"] == "completed", row
    return json.loads(row["result_payload"])


@MARIADB
def test_a_workers_job_processes_run_with_the_fork_servers_app_forked_or_stock(
        make_app, db_url, namespace, tmp_path):
    app = make_app(broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, CRASH_HANDLERS))
    log = tmp_path / "worker.log"
    env = {"CRONJOBS_HANDLER_PATHS": os.pathsep.join((SAMPLE_HANDLERS, CRASH_HANDLERS)),
           "CRONJOBS_JOB_PROCESS_IDLE_SECONDS": "0.5"}
    with worker(db_url, namespace, log, threads=2, isolation="process", **env) as proc:
        first = _facts(app, queue.dispatch(MISBEHAVE, {"do": "facts"}, app=app), proc, log)
        assert first["preloaded_app"] is True, first  # the forked fork server's
        assert first["process_name"] == "cj-job"
        wait_for(lambda: not _fork_servers(proc.pid), 30, "the fork server retired", proc, log)
        again = _facts(app, queue.dispatch(MISBEHAVE, {"do": "facts"}, app=app), proc, log)
        assert again["preloaded_app"] is True, again  # the stock fork server's
        assert again["pid"] != first["pid"]
        [server] = _fork_servers(proc.pid)
        assert "cronjobs.worker.preload" in server.cmdline(), "started anew, not forked"


@SQLITE
def test_settings_other_than_the_fork_servers_give_the_job_process_its_own_app(make_app):
    # The test process's environment is not this App's settings: the fork server's App
    # (built from the environment) is not the job's.
    app = make_app(handler_paths=(SAMPLE_HANDLERS, CRASH_HANDLERS), log_level="DEBUG")
    one = Slots(app)
    try:
        _, result = one.run(job(1, MISBEHAVE, {"do": "facts"}), 30)
        assert result.kind == "completed", result
        assert result.result["preloaded_app"] is False
        assert result.result["process_name"] == "cj-job"
    finally:
        one.slots.close()
