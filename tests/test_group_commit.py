"""The group commit writes the outcomes that came in and claims the next rows in one
transaction; a batch the database refuses is written again one outcome at a time, so only the
refused outcome fails (`unrecordable.refused`) and the claim still runs."""

from __future__ import annotations

import threading
from datetime import datetime

import pytest
import sqlalchemy as sa

from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.job.executor import Executor, Prepared
from cronjobs.job.finishing import OutcomeWriter
from cronjobs.job.outcome import Outcome
from cronjobs.status import Ended, Status
from cronjobs.worker.groupcommit import BATCH_WINDOW_SECONDS, GroupCommit
from dashboard_helpers import row

pytestmark = pytest.mark.core  # the core subset (make test-core)

T0 = datetime(2026, 6, 1, 12, 0, 0)


class Timer:
    """A monotonic clock that moves only when told to (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def setup(make_app, rows: int, timer: Timer | None = None):
    app = make_app(clock=FrozenClock(T0))
    ids = [queue.dispatch("test.shape.execute", {"shape": "true"}) for _ in range(rows)]
    executor = Executor(app, "host:1")
    commit = GroupCommit(executor, 4, threading.Event(), timer=timer or Timer())
    return app, ids, executor, commit


def completed(executor: Executor, claimed: Prepared):
    return executor.plan(claimed.job, Outcome("completed", log="returned True"), 3.0)


def test_outcomes_and_the_next_claim_share_one_transaction(make_app):
    app, ids, executor, commit = setup(make_app, 5)
    assert commit.cycle([]) == ([], set()) and commit.commits == 0  # nothing to do: no SQL
    rows, drained = commit.cycle([("default", 3)])
    assert [r.job.id for r in rows] == ids[:3] and drained == set()
    for claimed in rows:
        commit.add(completed(executor, claimed))
    assert commit.waiting() == 3
    commits = []
    sa.event.listen(app.engine, "commit", lambda conn: commits.append(1))
    rows, drained = commit.cycle([("default", 3)])
    assert len(commits) == 1, "three outcomes and a claim in one transaction"
    assert [r.job.id for r in rows] == ids[3:] and drained == {"default"}
    assert (commit.commits, commit.claims, commit.waiting()) == (2, 2, 0)
    assert [row(app, i)["status"] for i in ids] == ["completed"] * 3 + ["running"] * 2
    assert executor.jobs_done == 3


def test_a_refused_batch_is_written_one_by_one_and_the_claim_still_runs(make_app):
    app, ids, executor, commit = setup(make_app, 4)
    rows, _ = commit.cycle([("default", 3)])
    plans = [completed(executor, claimed) for claimed in rows]
    plans[1].values["no_such_column"] = 1  # the database refuses this one outcome
    for plan in plans:
        commit.add(plan)
    rows, drained = commit.cycle([("default", 2)])
    assert [r.job.id for r in rows] == [ids[3]] and drained == {"default"}
    good, bad = (row(app, ids[0]), row(app, ids[2])), row(app, ids[1])
    assert all(r["status"] == "completed" and r["outcome_reason"] is None for r in good)
    assert (bad["status"], bad["outcome_reason"]) == ("failed", "unrecordable.refused")
    assert bad["error"].startswith("could not record the outcome (DatabaseRefused: "), bad["error"]
    assert ("host:1: failed in 3 ms - could not record the outcome (DatabaseRefused: "
            in bad["process_logs"]), bad["process_logs"]
    assert executor.jobs_done == 3


def test_the_writer_fences_a_run_that_lost_its_row(make_app):
    app, ids, executor, commit = setup(make_app, 1)
    [claimed], _ = commit.cycle([("default", 1)])
    writer = OutcomeWriter(app, "host:1")
    plan = completed(executor, claimed)
    [(written, final)] = writer.write_each([plan])
    assert (written is plan, final) == (True, Status.COMPLETED)
    assert writer.write_each([plan]) == [(plan, Ended.LOST)]  # the run no longer holds it
    assert row(app, ids[0])["status"] == "completed"


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_a_batch_with_a_run_that_lost_its_row_writes_the_others_and_fences_that_one(make_app):
    """The batch's one UPDATE takes fewer rows than it was given: the transaction is
    rolled back and the outcomes written one by one — the lost run writes nothing and is
    reported lost, the others are written, and the claim still runs."""
    app, ids, executor, commit = setup(make_app, 4)
    rows, _ = commit.cycle([("default", 3)])
    with app.engine.begin() as conn:  # as recover-stale and another worker's claim would
        conn.execute(sa.text("UPDATE cronjob_queue SET attempts = 2, worker_id = 'other:2' "
                             "WHERE id = :id"), {"id": ids[1]})
    for claimed in rows:
        commit.add(completed(executor, claimed))
    done = []
    executor.done = lambda plan, final: done.append((plan.job.id, final))
    rows, drained = commit.cycle([("default", 3)])
    assert [r.job.id for r in rows] == [ids[3]] and drained == {"default"}
    assert done == [(ids[0], Status.COMPLETED), (ids[1], Ended.LOST), (ids[2], Status.COMPLETED)]
    assert [row(app, i)["status"] for i in ids] == ["completed", "running", "completed",
                                                     "running"]
    lost = row(app, ids[1])
    assert (lost["attempts"], lost["worker_id"], lost["process_logs"]) == (2, "other:2", None)


def test_a_backlog_holds_a_small_batch_for_the_window_only(make_app):
    timer = Timer()
    app, ids, executor, commit = setup(make_app, 6, timer)
    rows, drained = commit.cycle([("default", 4)])  # all free slots filled: a backlog
    assert len(rows) == 4 and not drained
    assert not commit.holding(free=1, stopping=False), "no plan waits: nothing to hold for"
    assert commit.window_left() is None
    commit.add(completed(executor, rows[0]))
    timer.now += BATCH_WINDOW_SECONDS / 2
    assert commit.holding(free=1, stopping=False)
    assert commit.window_left() == pytest.approx(BATCH_WINDOW_SECONDS / 2)
    assert not commit.holding(free=2, stopping=False), "half the slots are free"
    assert not commit.holding(free=1, stopping=True)
    timer.now += BATCH_WINDOW_SECONDS
    assert not commit.holding(free=1, stopping=False) and commit.window_left() == 0.0
    rows, drained = commit.cycle([("default", 3)])  # the last due rows: no backlog now
    assert len(rows) == 2 and drained == {"default"}
    commit.add(completed(executor, rows[0]))
    assert not commit.holding(free=1, stopping=False)


def stopping_commit(make_app):
    """A group commit with one row claimed, and the worker's `stopped` and `stopping`
    events: `(executor, commit, claimed row, stopped, stopping)`."""
    app = make_app(clock=FrozenClock(T0))
    queue.dispatch("test.shape.execute", {"shape": "true"})
    executor = Executor(app, "host:1")
    stopped, stopping = threading.Event(), threading.Event()
    commit = GroupCommit(executor, 4, stopped, stopping=stopping, timer=Timer())
    (claimed,), _ = commit.cycle([("default", 1)])
    return executor, commit, claimed, stopped, stopping


def test_while_the_database_is_down_a_stopping_worker_waits_for_outcomes_not_claims(
        make_app, monkeypatch):
    from cronjobs.errors import DatabaseUnavailable
    from cronjobs.worker import groupcommit

    executor, commit, claimed, stopped, stopping = stopping_commit(make_app)

    def down(engine, work):
        raise DatabaseUnavailable("database unavailable: connection refused")

    monkeypatch.setattr(groupcommit, "run_in_transaction", down)
    claim = threading.Thread(target=commit.cycle, args=([("default", 1)],))
    claim.start()  # a claim alone, waiting 3 s for the database
    stopping.set()
    claim.join(2)
    assert not claim.is_alive(), "a stopping worker claims nothing: the wait ended"
    commit.add(completed(executor, claimed))
    write = threading.Thread(target=commit.cycle, args=([],))
    write.start()  # an outcome to write: waited for until the worker has stopped
    write.join(0.5)
    assert write.is_alive()
    stopped.set()
    write.join(2)
    assert not write.is_alive() and commit.waiting() == 0


def test_from_the_stop_a_worker_tries_its_last_outcomes_every_second(make_app, monkeypatch):
    # An outage's back-off grows (3 s, 6 s, ... 60 s): a database back a moment after the
    # SIGTERM waited for the next try, often after the worker's last 15 s, and those rows
    # ran again after recover-stale. From the stop on, every STOPPING_RETRY_SECONDS.
    import time

    from cronjobs.errors import DatabaseUnavailable
    from cronjobs.worker import groupcommit

    executor, commit, claimed, stopped, stopping = stopping_commit(make_app)
    real, back, tries = groupcommit.run_in_transaction, threading.Event(), []

    def flaky(engine, work):
        tries.append(time.monotonic())
        if not back.is_set():
            raise DatabaseUnavailable("database unavailable: connection refused")
        return real(engine, work)

    monkeypatch.setattr(groupcommit, "run_in_transaction", flaky)
    commit.add(completed(executor, claimed))
    write = threading.Thread(target=commit.cycle, args=([],))
    write.start()
    while len(tries) < 2:  # the first try, and the second 3 s later; the next is 6 s away
        time.sleep(0.05)
    stopping.set()
    time.sleep(0.3)
    back.set()  # the database is back just after the stop
    write.join(2 * groupcommit.STOPPING_RETRY_SECONDS)
    assert not write.is_alive(), tries
    assert commit.waiting() == 0 and not stopped.is_set()
    assert queue.get(claimed.job.id, ["status"])["status"] == "completed"
    assert len(tries) >= 4  # the one at the stop, and one a second later


def test_a_transaction_retried_after_the_stop_writes_outcomes_and_claims_nothing(
        make_app, monkeypatch):
    # The database was down when the worker was told to stop: the transaction that gets
    # through afterwards still carries the claim of before; it must take no row (a
    # stopping worker would never run it: it stayed `running` until its lease ended).
    from cronjobs.errors import DatabaseUnavailable
    from cronjobs.worker import groupcommit

    app = make_app(clock=FrozenClock(T0))
    ids = [queue.dispatch("test.shape.execute", {"shape": "true"}) for _ in range(2)]
    executor = Executor(app, "host:1")
    stopped, stopping = threading.Event(), threading.Event()
    commit = GroupCommit(executor, 4, stopped, stopping=stopping, timer=Timer())
    (claimed,), _ = commit.cycle([("default", 1)])
    commit.add(completed(executor, claimed))
    real, calls = groupcommit.run_in_transaction, []

    def down_once(engine, work):
        calls.append(1)
        if len(calls) == 1:
            stopping.set()  # the signal comes while the database is down
            raise DatabaseUnavailable("database unavailable: connection refused")
        return real(engine, work)

    monkeypatch.setattr(groupcommit, "run_in_transaction", down_once)
    rows, _ = commit.cycle([("default", 1)])  # waits out the first back-off (3 s)
    assert rows == [] and len(calls) == 2 and commit.waiting() == 0
    assert queue.get(ids[0], ["status"], app=app)["status"] == "completed"
    assert queue.get(ids[1], ["status"], app=app)["status"] == "pending"
