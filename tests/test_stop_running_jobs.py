"""An operator's Stop ends a running job within seconds, the way MAX_RUNTIME does: the job
process is killed and a new one takes the slot (a thread job is given up and the worker
recycles); the row ends failed with reason `stopped`, not retried. A row that does not run
is refused and nothing is written; `cronjobs stop ID` is the same action."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import REDIS, SAMPLE_HANDLERS, cli_env, effect_rows, run_cli
from cronjobs import queue
from cronjobs.actions import operator
from cronjobs.errors import JobNotFound, JobStateError
from cronjobs.handler import Job
from cronjobs.job import outcome
from cronjobs.store.models import cronjob_queue, cronjob_stop, cronjob_worker
from cronjobs.worker.loop import WorkerProcess
from test_worker_e2e import RECORD, wait_for
from test_worker_lifecycle import pid_alive

STOP_HANDLERS = str(Path(__file__).parent / "stop_handlers")
LONG, THREAD_LONG = "test.longsleep.execute", "test.threadlongsleep.execute"
REAL = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
STOP_WITHIN_SECONDS = 6.0  # measured ~1.1 s; the margin is for a loaded 2-core machine


def _ended(app, job_id: int):
    def check():
        row = queue.get(job_id, app=app)
        return row if row["status"] in ("failed", "completed", "pending") and row["error"] else None
    return check


def _stop_requests(app) -> list[tuple]:
    with app.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(cronjob_stop.c.job_id,
                                                         cronjob_stop.c.attempt))]


def test_a_stopped_run_fails_without_a_retry_whatever_its_attempts_left():
    job = Job.from_row({"id": 7, "type": "a.b.execute", "queue": "default", "status": "running",
                        "payload": "{}", "attempts": 1, "max_attempts": 3})
    now = datetime(2026, 6, 1, 12, 0)
    move = outcome.next_state(job, outcome.stopped("cli"), now, outcome.Policy())
    assert move.status == "failed"
    assert move.values["finished_at"] == now and "scheduled_at" not in move.values
    assert (move.values["outcome_reason"], move.values["error"]) == (
        "stopped", "stopped by an operator (cli)")


@REAL
def test_stop_kills_the_job_process_and_the_slot_runs_the_next_row(make_app):
    app = make_app(broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, STOP_HANDLERS))
    worker = WorkerProcess(app, ["default"], 1)
    worker.start()
    try:
        job_id = queue.dispatch(LONG, {"seconds": 600}, app=app)
        start = wait_for(lambda: effect_rows(app, "longsleep-start"), 60, "the job's start")[0]
        # the heartbeat names the job and its slot within a second or two
        wait_for(lambda: _heartbeat(app) == (1, f"{job_id}:1"), 10, "the busy slot reported")
        asked = time.monotonic()
        assert operator.stop(app, job_id, who="test")["attempts"] == 1
        operator.stop(app, job_id, who="test")  # a second Stop of the same run: no change
        row = wait_for(_ended(app, job_id), 15, "the stopped row")
        took = time.monotonic() - asked
        assert took < STOP_WITHIN_SECONDS, took
        assert (row["status"], row["outcome_reason"], row["error"], row["attempts"]) == (
            "failed", "stopped", "stopped by an operator (test)", 1)
        assert "stopped by an operator (test)" in row["process_logs"]
        wait_for(lambda: not pid_alive(start["pid"]), 5, "the job process gone")
        assert _stop_requests(app) == [(job_id, 1)]
        # the one slot takes the next row, in a new job process
        other = queue.dispatch(RECORD, {"tag": "after"}, app=app)
        wait_for(lambda: queue.get(other, ["status"], app=app)["status"] == "completed", 60,
                 "the next row in the same slot")
        assert effect_rows(app, "record")[-1]["pid"] != start["pid"]
        # The loop counts a job after its outcome's commit, which the wait above can see
        # first: wait for the count too.
        wait_for(lambda: worker.executor.jobs_done == 2, 10, "the second job counted")
        assert not worker.recycle.is_set()
        wait_for(lambda: _heartbeat(app) == (1, ""), 10, "the slot reported idle")
    finally:
        worker.shutdown(10)
    print(f"\nstop to failed row (process): {took:.2f} s")


def _heartbeat(app) -> tuple[int | None, str | None]:
    with app.engine.connect() as conn:
        row = conn.execute(sa.select(cronjob_worker.c.slots, cronjob_worker.c.job_slots)
                           ).first()
    return (row.slots, row.job_slots or "") if row else (None, None)


@REAL
def test_stop_gives_up_a_thread_job_and_the_worker_recycles(make_app, db_url, namespace,
                                                            tmp_path):
    app = make_app(broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, STOP_HANDLERS))
    job_id = queue.dispatch(THREAD_LONG, {"seconds": 600}, app=app)
    log = tmp_path / "worker.log"
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_LOG_LEVEL="INFO",
                  CRONJOBS_HANDLER_PATHS=f"{SAMPLE_HANDLERS}:{STOP_HANDLERS}")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--queues",
                                 "default", "--slots", "1", "--shutdown-timeout", "5"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: effect_rows(app, "threadlong-start"), 90, "the thread job's start",
                     proc, log)
            asked = time.monotonic()
            operator.stop(app, job_id, who="test")
            row = wait_for(_ended(app, job_id), 15, "the stopped row", proc, log)
            took = time.monotonic() - asked
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert code == 0, text
    assert took < STOP_WITHIN_SECONDS, took
    assert (row["status"], row["outcome_reason"], row["attempts"]) == ("failed", "stopped", 1)
    assert "stopped by an operator" in text and "recycling: thread job" in text, text
    print(f"\nstop to failed row (thread): {took:.2f} s")


@SQLITE
def test_a_row_that_does_not_run_is_refused_and_nothing_is_written(make_app, db_url):
    app = make_app()
    pending = queue.dispatch(RECORD, {}, app=app)
    done = queue.dispatch(RECORD, {}, app=app)
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == done)
                     .values(status="completed"))
    with pytest.raises(JobStateError, match=f"job {pending} is pending; only running rows"):
        operator.stop(app, pending)
    with pytest.raises(JobStateError, match=f"job {done} is completed; only running rows"):
        operator.stop(app, done)
    with pytest.raises(JobNotFound, match="no job with id 999"):
        operator.stop(app, 999)
    assert _stop_requests(app) == []
    env = cli_env(db_url)
    out = run_cli(["stop", str(done)], env)
    assert out.returncode == 2
    assert out.stderr.strip() == f"error: job {done} is completed; only running rows can be stopped"
    assert _stop_requests(app) == []


@SQLITE
def test_the_cli_stop_asks_for_the_current_attempt_of_a_running_row(make_app, db_url):
    app = make_app()
    job_id = queue.dispatch(RECORD, {}, app=app)
    with app.engine.begin() as conn:  # as a worker's claim leaves it: attempt 2 running
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id)
                     .values(status="running", attempts=2, worker_id="host:42"))
    out = run_cli(["stop", str(job_id)], cli_env(db_url))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (f"job {job_id}: stop requested (attempt 2 on worker host:42); "
                                  "its worker ends it within a few seconds")
    assert _stop_requests(app) == [(job_id, 2)]
    # the request names that run only: the next attempt of the row is not stopped by it
    with app.engine.connect() as conn:
        from cronjobs.store import stops
        assert stops.requested(conn, [(job_id, 2)]) == {job_id: "cli"}
        assert stops.requested(conn, [(job_id, 3)]) == {}
