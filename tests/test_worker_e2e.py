"""End to end: real `cronjobs worker` processes on Redis + MariaDB.

The row is the truth and the broker only carries ids: a worker drains hundreds of jobs,
claims by priority then age whatever order the messages come in, runs a doubly delivered
message once, picks up rows whose message was lost through the sweep, runs as several
child processes, and a dispatch inside a caller's Session sends only after the commit.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session

from conftest import REDIS, cli_env, effect_rows, effects
from cronjobs import queue, store
from cronjobs.store.db import run_in_transaction
from cronjobs.store.models import cronjob_queue
from cronjobs.worker.relay import PASS_ON_SECONDS

MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
pytestmark = [MARIADB, pytest.mark.slow]

RECORD = "test.record.execute"


# -- helpers ---------------------------------------------------------------------------

def _tail(path: Path, chars: int = 4000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-chars:]


def _stop(proc: subprocess.Popen, timeout: float = 60) -> int | None:
    """SIGTERM the worker and wait; None when it did not end in time (then it is killed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: parent and its children
        proc.wait(timeout=10)
        return None


@contextmanager
def worker(db_url: str, namespace: str, log_path: Path, *, threads: int = 8,
           processes: int = 1, broker_url: str = REDIS, queues: str = "default",
           isolation: str = "handler", **env: str) -> Iterator[subprocess.Popen]:
    """A `cronjobs worker` (Redis unless `broker_url` says otherwise) for `queues`;
    SIGTERM on exit, must exit 0."""
    cmd = [sys.executable, "-m", "cronjobs", "worker", "--queues", queues,
           "--threads", str(threads), "--isolation", isolation]
    if processes != 1:
        cmd += ["--processes", str(processes)]
    environ = cli_env(db_url, namespace, broker_url=broker_url, **env)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=environ, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            yield proc
        finally:
            code = _stop(proc)
    assert code == 0, f"worker exited with {code}; its output:\n{_tail(log_path)}"


def wait_for(check: Callable[[], object], timeout: float, what: str,
             proc: subprocess.Popen | None = None, log_path: Path | None = None,
             every: float = 0.1) -> object:
    """Poll `check()` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"worker ended with {proc.returncode} while waiting for {what}:\n"
                        f"{_tail(log_path) if log_path else ''}")
        time.sleep(every)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})\n"
                f"{_tail(log_path) if log_path else ''}")


def status_counts(app) -> dict[str, int]:
    q = cronjob_queue
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(q.c.status, sa.func.count()).group_by(q.c.status))
        return {status: n for status, n in rows}


def all_completed(app, total: int) -> Callable[[], bool]:
    return lambda: status_counts(app) == {"completed": total}


def job_rows(app) -> list[dict]:
    q = cronjob_queue
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(q).order_by(q.c.id)).mappings()]


@pytest.fixture
def rds():
    client = redis.Redis.from_url(REDIS)
    yield client
    client.close()


def queue_len(rds: redis.Redis, namespace: str) -> tuple[int, int]:
    """Messages of the `default` queue in Redis: (list length, message hash size)."""
    return rds.llen(f"{namespace}:default"), rds.hlen(f"{namespace}:default.msgs")


def empty_for(rds: redis.Redis, namespace: str, seconds: float) -> Callable[[], bool]:
    """A check that is True once the `default` queue has had no message for `seconds`."""
    since: list[float] = []

    def check() -> bool:
        if queue_len(rds, namespace) != (0, 0):
            since.clear()
            return False
        since[:] = since or [time.monotonic()]
        return time.monotonic() - since[0] >= seconds
    return check


# -- 1. throughput -----------------------------------------------------------------------

def test_worker_processes_500_jobs_end_to_end(make_app, db_url, namespace, tmp_path, rds):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=8) as proc:
        warm = queue.dispatch(RECORD, {"tag": "warm-up"}, app=app)
        wait_for(lambda: queue.get(warm, ["status"], app=app)["status"] == "completed", 30,
                 "the warm-up job", proc, log)

        started = time.monotonic()
        ids = [queue.dispatch(RECORD, {"tag": i}, app=app) for i in range(500)]
        dispatched = time.monotonic()
        wait_for(all_completed(app, 501), 120, "500 jobs completed", proc, log, every=0.05)
        drained = time.monotonic()

        # The same again with one INSERT round trip, so the worker, not the dispatch
        # loop of this test, sets the pace.
        started2 = time.monotonic()
        ids += queue.dispatch_many([{"type": RECORD, "payload": {"tag": f"b{i}"}}
                                    for i in range(500)], app=app)
        wait_for(all_completed(app, 1001), 120, "500 more jobs completed", proc, log,
                 every=0.05)
        drained2 = time.monotonic()
        # Doorbells a busy worker passed on may still circulate when the last row is done
        # (its own consumer takes them back); one fetched as it stops would be requeued by
        # Dramatiq's shutdown. So: every message consumed and acked while it runs, for
        # longer than a pass-on can be deferred (relay.PASS_ON_SECONDS)...
        wait_for(empty_for(rds, namespace, 2 * PASS_ON_SECONDS), 30,
                 "every message consumed and acked", proc, log, every=0.05)

    print(f"\n500 jobs dispatched one by one: dispatch {dispatched - started:.2f} s, "
          f"all completed after {drained - started:.2f} s = "
          f"{500 / (drained - started):.0f} jobs/s (1 process x 8 threads); "
          f"500 by dispatch_many: {drained2 - started2:.2f} s = "
          f"{500 / (drained2 - started2):.0f} jobs/s")
    rows = job_rows(app)
    assert len(rows) == 1001
    assert all(r["status"] == "completed" and r["attempts"] == 1 for r in rows)
    ran = [e["job_id"] for e in effect_rows(app, "record")]
    assert sorted(ran) == sorted([warm, *ids])  # every job ran exactly once
    assert queue_len(rds, namespace) == (0, 0)  # ...and the stop of an idle worker sent none


# -- 2. priority, then age, within one queue ----------------------------------------------

@pytest.mark.parametrize("sweep_env", [
    {},  # default sweep: the 200 messages as dispatched
    # A sweep that resends every pending row at start and every second: duplicate
    # messages, sent in priority order, race the original ones.
    {"CRONJOBS_SWEEP_INTERVAL_SECONDS": "1", "CRONJOBS_SWEEP_AFTER_SECONDS": "0"},
], ids=["messages-as-dispatched", "with-sweep-duplicates"])
def test_one_thread_runs_rows_by_priority_then_age_whatever_the_message_order(
        make_app, db_url, namespace, tmp_path, rds, sweep_env):
    app = make_app(broker_url=REDIS)
    rng = random.Random(20260105)
    priorities = {}
    for i in range(200):
        priority = rng.randint(1, 9)
        priorities[queue.dispatch(RECORD, {"tag": i}, priority=priority, app=app)] = priority
    # The messages (doorbells: up to one per row) wait in Redis in FIFO (id) order, which
    # is not the order to run.
    assert app.broker.flush()
    assert 1 <= queue_len(rds, namespace)[0] <= 200
    expected = sorted(priorities, key=lambda job_id: (priorities[job_id], job_id))
    assert expected != sorted(priorities)

    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=1, **sweep_env) as proc:
        wait_for(all_completed(app, 200), 60, "200 jobs completed", proc, log, every=0.05)

    # One thread: a handler's `test_effects` row is written before the next claim, so the
    # effect ids give the order of execution (`test_effects.started` is a single-precision
    # FLOAT on MariaDB, far too coarse for epoch seconds, so it cannot order runs).
    ran = [e["job_id"] for e in effect_rows(app, "record")]
    assert ran == expected
    rows = job_rows(app)
    # Rows claimed ahead share their claim's `started_at`: the finish times give the order.
    by_finish = [r["id"] for r in sorted(rows, key=lambda r: (r["finished_at"], r["id"]))]
    assert by_finish == expected
    started = {r["id"]: r["started_at"] for r in rows}
    assert all(started[a] <= started[b] for a, b in zip(expected, expected[1:], strict=False))
    assert {r["attempts"] for r in rows} == {1}
    assert len({r["worker_id"] for r in rows}) == 1


# -- 3. a message delivered twice ------------------------------------------------------------

def test_message_delivered_twice_runs_the_handler_once(make_app, db_url, namespace, tmp_path,
                                                       rds):
    app = make_app(broker_url=REDIS)
    first = queue.dispatch(RECORD, {"tag": "first", "sleep": 0.3}, app=app)
    app.broker.send(first, "default")  # the same row id delivered a second time
    assert app.broker.flush()
    assert queue_len(rds, namespace) == (2, 2)

    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=4) as proc:
        wait_for(lambda: queue.get(first, ["status"], app=app)["status"] == "completed", 30,
                 "the first job", proc, log)
        wait_for(lambda: queue_len(rds, namespace) == (0, 0), 30,
                 "both messages consumed", proc, log)
        # Again while the worker runs: two threads get the two messages at once.
        second = queue.dispatch(RECORD, {"tag": "second", "sleep": 0.3}, app=app)
        app.broker.send(second, "default")
        wait_for(lambda: queue.get(second, ["status"], app=app)["status"] == "completed",
                 30, "the second job", proc, log)
        wait_for(lambda: queue_len(rds, namespace) == (0, 0), 30,
                 "both messages of the second job consumed", proc, log)
        time.sleep(0.5)  # a late second run would show up here

    ran = [e["job_id"] for e in effect_rows(app, "record")]
    assert sorted(ran) == [first, second]
    for job_id in (first, second):
        row = queue.get(job_id, app=app)
        assert (row["status"], row["attempts"]) == ("completed", 1)
        assert row["process_logs"].count("attempt 1/") == 1


# -- 4. a lost message is resent by the sweep ------------------------------------------------

SWEEP_FAST = {"CRONJOBS_SWEEP_INTERVAL_SECONDS": "1", "CRONJOBS_SWEEP_AFTER_SECONDS": "1"}


def delete_namespace_keys(rds: redis.Redis, namespace: str) -> int:
    keys = list(rds.scan_iter(f"{namespace}:*", count=1000))
    if keys:
        rds.delete(*keys)
    return len(keys)


def test_rows_whose_messages_were_lost_before_the_worker_started_run_after_the_sweep(
        make_app, db_url, namespace, tmp_path, rds):
    app = make_app(broker_url=REDIS)
    ids = [queue.dispatch(RECORD, {"tag": i}, priority=i % 3, app=app) for i in range(30)]
    assert app.broker.flush()
    assert queue_len(rds, namespace)[0] >= 1
    assert delete_namespace_keys(rds, namespace) >= 2  # the broker lost every message
    assert queue_len(rds, namespace) == (0, 0)

    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=4, **SWEEP_FAST) as proc:
        wait_for(all_completed(app, 30), 30, "30 swept jobs completed", proc, log)

    assert sorted(e["job_id"] for e in effect_rows(app, "record")) == ids
    assert {r["attempts"] for r in job_rows(app)} == {1}


def test_running_worker_sweep_picks_up_rows_that_never_got_a_message(
        make_app, db_url, namespace, tmp_path, rds):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=4, **SWEEP_FAST) as proc:
        warm = queue.dispatch(RECORD, {"tag": "warm-up"}, app=app)  # the worker is up
        wait_for(lambda: queue.get(warm, ["status"], app=app)["status"] == "completed", 30,
                 "the warm-up job", proc, log)

        def insert(conn) -> list[int]:
            rows = [queue.build_row(app, RECORD, {"tag": f"lost-{i}"}) for i in range(20)]
            return [store.insert_job(conn, values)[0]["id"] for values in rows]

        lost = run_in_transaction(app.engine, insert)  # rows committed, no message sent
        assert queue_len(rds, namespace) == (0, 0)
        wait_for(all_completed(app, 21), 30, "20 message-less rows completed by the sweep",
                 proc, log)

    assert sorted(e["job_id"] for e in effect_rows(app, "record")) == [warm, *lost]
    assert {r["attempts"] for r in job_rows(app)} == {1}


# -- 5. --processes 2 ---------------------------------------------------------------------------

def test_two_processes_share_the_work_and_sigterm_ends_them_all(make_app, db_url, namespace,
                                                                tmp_path, rds):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=2, processes=2) as proc:
        # Each consumer stamps its broker id in `<ns>:__heartbeats__` when it fetches; this
        # process has sent nothing yet, so two entries mean both children are consuming
        # (otherwise a slow second start could leave all the work to the first child).
        wait_for(lambda: rds.zcard(f"{namespace}:__heartbeats__") == 2, 30,
                 "both children consuming", proc, log)
        ids = [queue.dispatch(RECORD, {"tag": i, "sleep": 0.05}, app=app) for i in range(100)]
        wait_for(all_completed(app, 100), 60, "100 jobs completed", proc, log)
        parent = proc.pid

    done = effect_rows(app, "record")
    assert sorted(e["job_id"] for e in done) == ids
    workers = {int(r["worker_id"].rsplit(":", 1)[1]) for r in job_rows(app)}
    assert len(workers) == 2 and parent not in workers, workers
    # Handlers run in job processes (one per worker thread: 2 x 2), never in the workers.
    job_pids = {e["pid"] for e in done}
    assert 2 <= len(job_pids) <= 4 and not job_pids & workers, (job_pids, workers)
    for pid in workers | job_pids:  # the parent waited for its children: all are gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    output = _tail(log, 100_000)
    assert "Traceback" not in output and "exited with" not in output, output  # no child died


# -- 6. dispatch inside a caller's Session -------------------------------------------------------

def test_dispatch_in_a_session_sends_only_after_commit(make_app, db_url, namespace, rds):
    app = make_app(broker_url=REDIS)
    app.broker.declare(["default"])
    other = sa.create_engine(db_url, poolclass=sa.pool.NullPool)  # another connection
    events: list[tuple] = []

    def visible(job_id: int) -> bool:
        with other.connect() as conn:
            return conn.execute(sa.select(cronjob_queue.c.id)
                                .where(cronjob_queue.c.id == job_id)).first() is not None

    forget = app.broker.listen(
        lambda job_id, q, delay: events.append(("send", job_id, visible(job_id))))
    try:
        before = queue_len(rds, namespace)

        # Rollback: no row, no message, no send, and nothing left to send later.
        with Session(app.engine) as session:
            session.execute(sa.insert(effects).values(kind="caller", info="rolled back"))
            gone = queue.dispatch(RECORD, {"tag": "rolled back"}, session=session, app=app)
            session.rollback()
            session.commit()  # a later commit of the same session sends nothing either
        assert queue.get(gone, app=app) is None
        assert status_counts(app) == {}
        assert effect_rows(app) == []
        assert events == []
        assert queue_len(rds, namespace) == before

        # Commit: the row commits first, then its id goes to the broker.
        with Session(app.engine) as session:
            event.listen(session, "after_commit", lambda s: events.append(("commit",)))
            session.execute(sa.insert(effects).values(kind="caller", info="committed"))
            job_id = queue.dispatch(RECORD, {"tag": "committed"}, session=session, app=app)
            assert not visible(job_id)
            assert events == []
            assert queue_len(rds, namespace) == before
            session.commit()
        assert events == [("commit",), ("send", job_id, True)]
        assert app.broker.flush()
        assert queue_len(rds, namespace) == (before[0] + 1, before[1] + 1)
        messages = [json.loads(m) for m in rds.hvals(f"{namespace}:default.msgs")]
        assert [m["args"] for m in messages] == [[job_id]]
        assert queue.get(job_id, ["status"], app=app) == {"status": "pending"}
        assert [e["info"] for e in effect_rows(app, "caller")] == ["committed"]
    finally:
        forget()
        other.dispose()
