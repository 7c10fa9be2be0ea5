"""`recover_stale` takes back only rows whose lease expired (never a renewed one); `cleanup`
deletes finished rows past their retention in batches, keeps a cancelled parent whose
children live, and forgets the heartbeats of killed workers (rows given old timestamps)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.errors import InvalidJob
from cronjobs.job.executor import Executor
from cronjobs.store.models import cronjob_queue as q

T0 = datetime(2026, 6, 1, 12, 0, 0)


def set_row(app, job_id: int, **values) -> None:
    with app.engine.begin() as conn:
        conn.execute(q.update().where(q.c.id == job_id).values(**values))


def db_ago(app, seconds: float):
    """The database clock's now minus `seconds` (leases and heartbeats use that clock)."""
    from cronjobs import store

    with app.engine.connect() as conn:
        return store.database_now(conn) - timedelta(seconds=seconds)


def test_recover_stale_takes_only_expired_leases(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    sent = []
    app.broker.listen(lambda job_id, queue_, delay: sent.append(job_id))
    live, stale, exhausted = (queue.dispatch("test.shape.execute", {}) for _ in range(3))
    set_row(app, live, status="running", attempts=1, locked_until=db_ago(app, -60))
    set_row(app, stale, status="running", attempts=1, locked_until=db_ago(app, 6 * 60),
            worker_id="gone:1")
    set_row(app, exhausted, status="running", attempts=3, max_attempts=3,
            locked_until=db_ago(app, 10 * 60))
    sent.clear()
    assert queue.recover_stale(5) == 2
    assert queue.get(live)["status"] == "running"
    row = queue.get(stale)
    assert row["status"] == "pending" and row["attempts"] == 1
    assert "lease expired on worker gone:1" in row["process_logs"]
    row = queue.get(exhausted)
    assert row["status"] == "failed" and "no attempts left (3/3)" in row["error"]
    assert sent == [stale], "the row put back to pending is sent to the broker again"
    assert queue.recover_stale(5) == 0


def test_a_renewed_lease_is_never_taken(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    job_id = queue.dispatch("test.shape.execute", {})
    executor = Executor(app, "w:1")
    with app.engine.begin() as conn:
        claim = executor.claim_rows(conn, T0, job_id=job_id)
    [row] = claim.rows
    executor.prepare(row, claim.terms[row["type"]])  # its lease is renewed from now on
    for _ in range(20):  # an hour and forty minutes of renewals every 5 minutes
        clock.advance(300)
        assert executor.renew_leases() == 1
        assert queue.recover_stale(0) == 0
    assert queue.get(job_id)["status"] == "running"


def test_cleanup_respects_retention_and_batches(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, cleanup_batch_size=3)
    ids = {}
    for status, age_days, n in (("completed", 8, 5), ("completed", 6, 2), ("failed", 31, 4),
                                ("failed", 29, 1), ("cancelled", 8, 2), ("pending", 90, 1)):
        for _ in range(n):
            job_id = queue.dispatch("test.shape.execute", {})
            set_row(app, job_id, status=status, finished_at=T0 - timedelta(days=age_days))
            ids.setdefault((status, age_days), []).append(job_id)
    dry = queue.cleanup(dry_run=True)
    assert dry == {"completed": 5, "failed": 4, "cancelled": 2}, "dry run counts every batch"
    assert queue.cleanup() == {"completed": 5, "failed": 4, "cancelled": 2}
    with app.engine.connect() as conn:
        left = sorted(r[0] for r in conn.execute(sa.select(q.c.id)))
    assert left == sorted(ids[("completed", 6)] + ids[("failed", 29)] + ids[("pending", 90)])
    assert queue.cleanup({"completed": 1}) == {"completed": 2, "failed": 0, "cancelled": 0}
    with pytest.raises(InvalidJob, match="retention"):
        queue.cleanup({"done": 3})


def test_cleanup_keeps_a_cancelled_parent_with_live_children(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    parent = queue.dispatch("test.shape.execute", {})
    child = queue.dispatch("test.shape.execute", {}, parent_id=parent)
    set_row(app, parent, status="cancelled", finished_at=T0 - timedelta(days=30))
    assert queue.cleanup()["cancelled"] == 0
    set_row(app, child, status="completed", finished_at=T0)
    assert queue.cleanup() == {"completed": 0, "failed": 0, "cancelled": 0}, \
        "the child is not past its retention, so the parent stays too"
    set_row(app, child, finished_at=T0 - timedelta(days=8))
    assert queue.cleanup() == {"completed": 1, "failed": 0, "cancelled": 1}
    assert queue.get(child) is None and queue.get(parent) is None


def test_cleanup_forgets_heartbeats_of_killed_workers(make_app):
    from cronjobs import store
    from cronjobs.store.db import run_in_transaction
    from cronjobs.store.models import cronjob_worker
    from cronjobs.worker import heartbeat

    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    heartbeat.beat(app, "gone:1", ["default"], "running", 5, [])
    heartbeat.beat(app, "alive:2", ["default"], "running", 1, [7])
    two_days_ago = db_ago(app, 2 * 86400)  # heartbeat ages follow the database's clock
    with app.engine.begin() as conn:
        conn.execute(cronjob_worker.update().where(cronjob_worker.c.id == "gone:1")
                     .values(last_seen_at=two_days_ago))
    queue.cleanup()
    ids = [w["id"] for w in run_in_transaction(app.engine, lambda c: store.list_workers(c, 30))]
    assert ids == ["alive:2"]
