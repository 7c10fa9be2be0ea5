"""The job processes of a real `cronjobs serve` run every job with the App their fork server
preloaded: its pages stay shared, and a handler file edited, or saved with a syntax
error, while serve runs changes nothing (no mix of old and new code, no start-fail loop)
until serve restarts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conftest import cli_env
from cronjobs import queue
from cronjobs.worker.loop import WorkerProcess
from test_worker_e2e import _stop, _tail, wait_for

pytestmark = pytest.mark.core  # the core subset (make test-core)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
PROBE = "probe.version.execute"

HANDLER = '''
import os
import sys

from cronjobs import CronJobHandler

VERSION = {version}


class VersionExecute(CronJobHandler):
    TYPE = "probe.version.execute"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        if payload.get("die"):
            os._exit(3)  # the job process dies: the worker forks a new one
        jobprocess = sys.modules.get("cronjobs.worker.jobprocess")
        app = self.context.app
        return {{"success": True, "result": {{
            "version": VERSION, "pid": os.getpid(),
            "preloaded": jobprocess is not None and jobprocess.preloaded() is app,
            "own_class": app.handlers.resolve_handler(self.TYPE) is type(self)}}}}
'''


def write_handler(folder: Path, version: int) -> None:
    (folder / "VersionExecute.py").write_text(textwrap.dedent(HANDLER.format(version=version)))


def results(app, ids: list[int]) -> list[dict]:
    rows = [queue.get(i, ["status", "result_payload", "error"], app=app) for i in ids]
    assert all(r["status"] == "completed" for r in rows), rows
    return [json.loads(r["result_payload"]) for r in rows]


def run_probes(app, proc, log: Path, n: int) -> list[dict]:
    ids = [queue.dispatch(PROBE, {"n": i}, app=app) for i in range(n)]
    wait_for(lambda: all(queue.get(i, ["status"], app=app)["status"] not in ("pending", "running")
                         for i in ids), 60, f"{n} probe jobs", proc, log)
    return results(app, ids)


def kill_job_processes(app, proc, log: Path, count: int) -> None:
    """Jobs that kill their job process, one at a time: each process is replaced by a new
    one forked from the fork server."""
    for _ in range(count):
        job_id = queue.dispatch(PROBE, {"die": True}, app=app)
        wait_for(lambda job_id=job_id: queue.get(job_id, ["status"], app=app)["status"]
                 == "failed", 60, "a job process died", proc, log)
        assert "job process died (exit code 3)" in queue.get(job_id, ["error"], app=app)["error"]


@SQLITE
def test_serve_job_processes_use_the_preloaded_app_and_keep_its_code(make_app, db_url, tmp_path):
    folder = tmp_path / "handlers"
    folder.mkdir()
    write_handler(folder, 1)
    app = make_app(handler_paths=(str(folder),))
    env = cli_env(db_url, CRONJOBS_HANDLER_PATHS=str(folder), CRONJOBS_LOG_LEVEL="INFO")
    log = tmp_path / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "serve", "--port", "0",
                                 "--threads", "2"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    try:
        wait_for(lambda: "cronjobs is running" in _tail(log), 60, "serve started", proc, log)
        first = run_probes(app, proc, log, 6)
        assert {r["version"] for r in first} == {1}
        assert all(r["preloaded"] and r["own_class"] for r in first), first
        pids = {r["pid"] for r in first}
        assert len(pids) <= 2 and os.getpid() not in pids and proc.pid not in pids

        # The job processes' own memory is small: they share the fork server's pages.
        memory = [psutil.Process(pid).memory_full_info() for pid in pids]
        private = [m.uss / 1e6 for m in memory]
        rss = [m.rss / 1e6 for m in memory]
        assert max(private) < 0.5 * min(rss), (private, rss)

        # A new version of the handler saved while serve runs: processes forked after
        # that (two killed and replaced) still run the fork server's code.
        write_handler(folder, 2)
        kill_job_processes(app, proc, log, 2)
        second = run_probes(app, proc, log, 6)
        assert {r["version"] for r in second} == {1}, second
        assert all(r["preloaded"] for r in second), second
        assert {r["pid"] for r in second} - pids, "the job processes were replaced"

        # A handler file with a syntax error: the replaced processes start and run jobs.
        (folder / "VersionExecute.py").write_text("def broken(:\n")
        (folder / "BrokenExecute.py").write_text("class BrokenExecute(:\n")
        kill_job_processes(app, proc, log, 2)
        third = run_probes(app, proc, log, 4)
        assert {r["version"] for r in third} == {1} and all(r["preloaded"] for r in third)
        text = _tail(log, 200_000)
        assert "did not start" not in text and "starting another" not in text, text[-4000:]
        assert "SyntaxError" not in text, text[-4000:]
    finally:
        code = _stop(proc)
    assert code == 0, _tail(log)


@SQLITE
def test_a_worker_with_other_settings_gets_job_processes_with_their_own_app(make_app, tmp_path):
    """A worker started from code with settings the fork server did not read: each job
    process builds an App of its own (its own registry, no global reset) and runs the
    job with the worker's handler folder."""
    folder = tmp_path / "handlers"
    folder.mkdir()
    write_handler(folder, 7)
    app = make_app(handler_paths=(str(folder),))
    worker = WorkerProcess(app, ["default"], 1)
    worker.start()
    try:
        job_id = queue.dispatch(PROBE, {}, app=app)
        deadline = time.monotonic() + 60
        while queue.get(job_id, ["status"])["status"] in ("pending", "running"):
            assert time.monotonic() < deadline, "the job did not run"
            worker.pool.ring("default")
            time.sleep(0.05)
    finally:
        worker.shutdown(10)
    (result,) = results(app, [job_id])
    assert result["version"] == 7 and result["own_class"] and not result["preloaded"]
    assert result["pid"] != os.getpid()
