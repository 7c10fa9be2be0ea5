"""With a real worker on MariaDB + Redis: job processes start when rows need them, end after
sitting idle for `CRONJOBS_JOB_PROCESS_IDLE_SECONDS`, and so does the fork server once no
job process has lived for as long (the worker keeps only its own process); a row arriving
afterwards starts them again and still gets the hard MAX_RUNTIME stop — in both execution
modes of the CLI."""

from __future__ import annotations

import time

import psutil
import pytest
import sqlalchemy as sa

from conftest import REDIS, effect_rows
from cronjobs import queue
from test_worker_children import running
from test_worker_e2e import RECORD, all_completed, wait_for, worker
from test_worker_lifecycle import MODES, assert_timed_out

pytestmark = [pytest.mark.parametrize("backend", ["mariadb"], indirect=True),
              pytest.mark.slow, pytest.mark.core]


def _fork_servers(worker_pid: int) -> list[psutil.Process]:
    """The worker's fork server: the child it forked or started fresh (`cj-forkserver`;
    one started fresh runs `cronjobs.worker.preload`, named so once it runs)."""
    found = []
    for child in psutil.Process(worker_pid).children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if child.name() == "cj-forkserver" \
                    or "cronjobs.worker.preload" in child.cmdline():
                found.append(child)
        except psutil.Error:  # ended while we looked
            pass
    return found


def job_processes(worker_pid: int) -> list[int]:
    """Pids of the worker's job processes: the children of its fork server."""
    pids = []
    for server in _fork_servers(worker_pid):
        try:
            pids += [c.pid for c in server.children()]
        except psutil.Error:
            pass
    return pids


def fork_servers(worker_pid: int) -> int:
    return len(_fork_servers(worker_pid))


@MODES
def test_idle_job_processes_retire_and_a_later_row_still_gets_max_runtime(
        make_app, db_url, namespace, tmp_path, isolation):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=4, isolation=isolation,
                CRONJOBS_JOB_PROCESS_IDLE_SECONDS="1", CRONJOBS_LOG_LEVEL="INFO") as proc:
        wait_for(lambda: fork_servers(proc.pid) == 1, 30, "the fork server", proc, log)
        assert job_processes(proc.pid) == [], "no job process before a row needs one"
        queue.dispatch_many([{"type": RECORD, "payload": {}}] * 8, app=app)
        wait_for(all_completed(app, 8), 60, "8 jobs", proc, log)
        used = {row["pid"] for row in effect_rows(app, "record")}
        assert 1 <= len(used) <= 4, used
        wait_for(lambda: job_processes(proc.pid) == [], 30, "idle job processes ended",
                 proc, log)
        assert not any(psutil.pid_exists(pid) for pid in used)
        wait_for(lambda: fork_servers(proc.pid) == 0, 30, "the idle fork server ended",
                 proc, log)
        job_id = queue.dispatch("test.sleep.execute", {"seconds": 600}, app=app)
        assert_timed_out(app, job_id, "sleep-start", proc, log)
        [blocked] = effect_rows(app, "sleep-start")
        assert blocked["pid"] not in used, "the row after the retirement ran in a new process"
        assert fork_servers(proc.pid) == 1, "the fork server started again for it"


def test_a_killed_worker_leaves_no_job_process_running(make_app, db_url, namespace, tmp_path):
    # kill -9 of the worker alone, not its process group (a supervisor may kill only it):
    # the fork server sees the worker's end of its pipe close and exits, and the job
    # process dies with it (PR_SET_PDEATHSIG) instead of running on beside the retry that
    # recover-stale will start elsewhere.
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with running(db_url, namespace, log, ("--slots", "2")) as proc:
        job_id = queue.dispatch("test.slow.execute", {"seconds": 5}, app=app)
        wait_for(lambda: queue.get(job_id, app=app)["status"] == "running", 30,
                 "the job running", proc, log)
        [server] = _fork_servers(proc.pid)
        [job_process] = wait_for(lambda: job_processes(proc.pid), 10, "its job process",
                                 proc, log)
        proc.kill()
        proc.wait(10)
        wait_for(lambda: not psutil.pid_exists(job_process) and not psutil.pid_exists(
            server.pid), 10, "the job process and the fork server gone")
        time.sleep(6)  # past the end the job would have reached
        assert effect_rows(app, "slow") == [], "the job ran to its end after the kill"


def test_a_row_dispatched_by_a_job_reaches_the_broker_when_its_process_retires_at_once(
        make_app, db_url, namespace, tmp_path):
    # With CRONJOBS_JOB_PROCESS_IDLE_SECONDS=0 a job process ends right after its job, by
    # os._exit (no exit hook): the message of a row its handler dispatched, still with its
    # doorbell thread, must be sent before it ends. Nothing else rings the worker here and
    # the sweep would wait 600 s, so the child runs only if that message went out.
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=2, CRONJOBS_JOB_PROCESS_IDLE_SECONDS="0",
                CRONJOBS_SWEEP_AFTER_SECONDS="600") as proc:
        for _ in range(3):
            parent = queue.dispatch("test.shape.execute", {"shape": "spawn"}, app=app)

            def children(parent: int = parent) -> list[str]:
                with app.engine.connect() as conn:
                    return conn.execute(sa.text(
                        "SELECT status FROM cronjob_queue WHERE parent_id = :p AND "
                        "status = 'completed'"), {"p": parent}).scalars().all()

            wait_for(children, 15, f"the child of row {parent} completed", proc, log)
            assert queue.get(parent, app=app)["status"] == "completed"
