"""`cronjobs worker --burst` runs every due row of its queues in real job processes and
exits 0 once a claim finds nothing due and none of its jobs runs, with or without a
broker, printing what ran, failed and was left waiting (due later, or due but held back
from the claim); `testing.drain` reports the same counts."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from conftest import REDIS, SAMPLE_HANDLERS, cli_env, effect_rows
from cronjobs import queue
from cronjobs.cli import main
from cronjobs.job import failures
from cronjobs.store.models import cronjob_queue
from cronjobs.testing import drain, make_test_app

SERVERS = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
CLOSED_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1: every send fails
RECORD = "test.record.execute"
SHAPE = "test.shape.execute"
LINE = re.compile(r"^burst: ran (\d+) \(completed (\d+), failed (\d+), retried (\d+)"
                  r"(?:, other (\d+))?\); waiting (\d+) \(scheduled later (\d+), "
                  r"(?:held|due now) (\d+)\)",
                  re.MULTILINE)


def _burst(db_url: str, namespace: str, broker_url: str, timeout: float = 90
           ) -> tuple[subprocess.CompletedProcess, dict[str, int], float]:
    """Run `cronjobs worker --burst --queues default --slots 4`; returns the process,
    the counts of its summary line and the seconds it took."""
    env = cli_env(db_url, namespace, broker_url=broker_url)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cronjobs", "worker", "--burst", "--queues",
                           "default", "--slots", "4"], env=env, capture_output=True, text=True,
                          timeout=timeout)
    took = time.monotonic() - started
    match = LINE.search(proc.stdout)
    assert match, f"no summary line; exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    names = ["ran", "completed", "failed", "retried", "other", "waiting", "later", "held"]
    return proc, {k: int(v or 0) for k, v in zip(names, match.groups(), strict=True)}, took


def _statuses(app) -> dict[str, int]:
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(cronjob_queue.c.status, sa.func.count())
                            .group_by(cronjob_queue.c.status)).all()
    return dict(rows)


@SERVERS
def test_burst_runs_the_due_rows_and_reports_rows_due_later_as_waiting(make_app, db_url,
                                                                       namespace):
    app = make_app()
    queue.dispatch_many([{"type": RECORD, "payload": {"tag": str(i)}} for i in range(100)])
    later = datetime.now(UTC) + timedelta(hours=1)
    queue.dispatch_many([{"type": RECORD, "payload": {"tag": "later"}, "scheduled_at": later}
                         for _ in range(5)])

    proc, counts, took = _burst(db_url, namespace, REDIS)

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert counts == {"ran": 100, "completed": 100, "failed": 0, "retried": 0, "other": 0,
                      "waiting": 5, "later": 5, "held": 0}
    assert _statuses(app) == {"completed": 100, "pending": 5}
    ran = effect_rows(app, "record")
    assert len(ran) == 100 and len({r["job_id"] for r in ran}) == 100
    assert "later" not in {r["info"] for r in ran}
    assert took < 60


@SERVERS
def test_burst_drains_with_the_broker_down_counting_failed_retried_and_held_rows(
        make_app, db_url, namespace):
    app = make_app()
    queue.dispatch_many([{"type": RECORD, "payload": {"tag": str(i)}} for i in range(20)])
    failing = queue.dispatch(SHAPE, {"shape": "dict_fail_no_retry"})
    backing_off = queue.dispatch(SHAPE, {"shape": "raise"})  # attempt 1 of 3: 2 min back-off
    parent = queue.dispatch(SHAPE, {"shape": "cancel", "children": True})  # one child, due now
    locked = queue.dispatch(RECORD, {"tag": "locked"})
    holder = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with holder.connect() as conn, conn.begin():
        # Due, but locked by another transaction: the claim skips it (SKIP LOCKED), so it
        # is held, as a blocked, paused or limited row would be.
        conn.execute(sa.select(cronjob_queue.c.id).where(cronjob_queue.c.id == locked)
                     .with_for_update())
        proc, counts, _ = _burst(db_url, namespace, CLOSED_BROKER)
    holder.dispose()

    assert proc.returncode == 0, proc.stderr[-3000:]
    # 20 records, the failing row, the raising row, the parent (cancelled) and its child
    assert counts == {"ran": 24, "completed": 21, "failed": 1, "retried": 1, "other": 1,
                      "waiting": 2, "later": 1, "held": 1}
    with app.engine.connect() as conn:
        rows = dict(conn.execute(sa.select(cronjob_queue.c.id, cronjob_queue.c.status)).all())
        child = conn.execute(sa.select(cronjob_queue.c.status)
                             .where(cronjob_queue.c.parent_id == parent)).scalar_one()
    assert (rows[failing], rows[backing_off], rows[locked], child) == (
        "failed", "pending", "pending", "completed")
    assert len(effect_rows(app, "record")) == 20
    # The raising row's traceback crossed the pipe from its job process, and the worker
    # log's WARNING line names the frame that raised.
    raised = queue.get(backing_off, ["traceback", "fingerprint"])
    assert raised["traceback"].startswith("ValueError: boom from handler\nTraceback")
    assert re.search(r'ShapeExecute\.py", line 19, in handle', raised["traceback"])
    assert raised["fingerprint"] == failures.fingerprint("ValueError: boom from handler")
    assert re.search(rf"job {backing_off} failed: ValueError: boom from handler "
                     rf"\(\S*ShapeExecute\.py:19\)", proc.stderr), proc.stderr[-3000:]


def test_burst_refuses_processes_and_recycling_limits():
    for extra, named in ((["--processes", "2"], "--processes 2"),
                         (["--max-jobs", "5"], "--max-jobs 5"),
                         (["--time-limit", "60"], "--time-limit 60")):
        result = CliRunner().invoke(main, ["worker", "--burst", *extra])
        assert result.exit_code == 2, result.output
        assert named in result.output and "--burst" in result.output


def test_drain_reports_the_same_counts_as_a_burst(tmp_path):
    app = make_test_app(tmp_path, handler_paths=[SAMPLE_HANDLERS])
    now = app.clock.now()
    ok = [queue.dispatch(SHAPE, {"shape": "true"}) for _ in range(3)]
    queue.dispatch(SHAPE, {"shape": "dict_fail_no_retry"})
    queue.dispatch(SHAPE, {"shape": "raise"})
    for _ in range(2):
        queue.dispatch(SHAPE, {"shape": "true"}, scheduled_at=now + timedelta(hours=1))

    report = drain(app, ["default"])

    assert len(report) == report.ran == 5  # len() is still the number of runs
    assert (report.completed, report.failed, report.retried) == (3, 1, 1)
    assert (report.waiting.scheduled_later, report.waiting.held) == (3, 0)
    assert report.drained and all(report.statuses()[i] == "completed" for i in ok)
    assert report.line() == ("burst: ran 5 (completed 3, failed 1, retried 1); "
                             "waiting 3 (scheduled later 3, held 0)")



@SERVERS
def test_a_live_pause_or_block_does_not_keep_a_burst_running(make_app, db_url, namespace):
    """Pauses and blocks, of other queues or of its own, never keep a burst waiting: it
    runs what it may and reports the held rows (only rows held by a limit of its queues,
    which come free by themselves, are waited for)."""
    from cronjobs import store

    app = make_app()
    now = datetime.now(UTC).replace(tzinfo=None)
    with app.engine.begin() as conn:
        store.pause(conn, "queue", "elsewhere", now=now, by="test")
        store.block(conn, SHAPE, None, now=now, until=now + timedelta(hours=1))
    queue.dispatch_many([{"type": RECORD, "payload": {"tag": str(i)}} for i in range(3)])
    blocked = queue.dispatch(SHAPE, {"shape": "true"})
    proc, counts, took = _burst(db_url, namespace, REDIS, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (counts["ran"], counts["completed"], counts["held"]) == (3, 3, 1), proc.stdout
    assert queue.get(blocked, ["status", "attempts"]) == {"status": "pending", "attempts": 0}
    with app.engine.begin() as conn:
        store.pause(conn, "queue", "default", now=now, by="test")
    queue.dispatch(RECORD, {"tag": "paused"})
    proc, counts, took = _burst(db_url, namespace, REDIS, timeout=60)
    assert proc.returncode == 0 and (counts["ran"], counts["held"]) == (0, 2), proc.stdout
    assert took < 30, took


@SERVERS
def test_stop_ends_a_job_of_a_burst(make_app, db_url, namespace):
    """`cronjobs stop ID` (the dashboard's Stop) ends a job a burst runs, as it does under
    `cronjobs worker`: failed with reason `stopped`, and the burst goes on and exits."""
    from pathlib import Path

    from cronjobs.actions import operator

    stop_handlers = str(Path(__file__).parent / "stop_handlers")
    app = make_app(handler_paths=(SAMPLE_HANDLERS, stop_handlers))
    job_id = queue.dispatch("test.longsleep.execute", {"seconds": 600}, app=app)
    env = cli_env(db_url, namespace, broker_url=REDIS)
    env["CRONJOBS_HANDLER_PATHS"] = f"{SAMPLE_HANDLERS}:{stop_handlers}"
    proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--burst", "--queues",
                             "default", "--slots", "2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while queue.get(job_id, ["status"], app=app)["status"] != "running":
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            time.sleep(0.1)
        operator.stop(app, job_id, who="test")
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    row = queue.get(job_id, app=app)
    assert (row["status"], row["outcome_reason"], row["error"]) == (
        "failed", "stopped", "stopped by an operator (test)")
    assert LINE.search(out).group(3) == "1", out  # failed 1


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_burst_stopped_while_the_database_is_down_ends(make_app, monkeypatch):
    # Its loop waited for the database to take a finished job's outcome, and nothing ever
    # ended that wait: the process hung at exit (joining an idle job process that waited
    # for the loop to close its pipe) and, once the database came back, claimed a row it
    # never ran.
    import threading

    from cronjobs.errors import DatabaseUnavailable
    from cronjobs.worker import groupcommit
    from cronjobs.worker.burst import BurstWorker
    from cronjobs.worker.loop import Signals

    app = make_app(handler_paths=(SAMPLE_HANDLERS,))
    job_id = queue.dispatch(SHAPE, {"shape": "true"}, app=app)
    later = queue.dispatch(SHAPE, {"shape": "true"}, app=app)
    real, calls = groupcommit.run_in_transaction, []

    def down_after_the_claim(engine, work):
        calls.append(1)
        if len(calls) > 1:
            raise DatabaseUnavailable("database unavailable: connection refused")
        return real(engine, work)

    monkeypatch.setattr(groupcommit, "run_in_transaction", down_after_the_claim)
    burst, signals = BurstWorker(app, ["default"], 1), Signals()
    stop_later = threading.Timer(2.0, signals.stop.set)  # the job has finished by then
    stop_later.start()
    started = time.monotonic()
    report = burst.run(signals, shutdown_timeout=1)
    assert time.monotonic() - started < 30 and not report.drained
    # stopped before done: the rows due now were not all tried, so they are not "held"
    assert report.line().endswith(f"due now {report.waiting.held}); stopped before done")
    assert burst.pool.join(1), "the loop ended (and closed its job processes)"
    assert len(calls) >= 2  # it tried to write the outcome
    assert queue.get(job_id, ["status"], app=app)["status"] == "running"  # lease, then back
    assert queue.get(later, ["status"], app=app)["status"] == "pending"
