"""Claiming (SPEC §5): priority then age within a queue; a row runs at most once at a time."""

from __future__ import annotations

import random
from datetime import datetime

from cronjobs import queue, store
from cronjobs.clock import FrozenClock

T0 = datetime(2026, 2, 2, 2, 2, 2)


def test_run_next_takes_priority_then_age(make_app):
    app = make_app(clock=FrozenClock(T0))
    rng = random.Random(7)
    ids = [(rng.randint(1, 9), queue.dispatch("test.shape.execute", {"shape": "true"},
                                              priority=0)) for _ in range(30)]
    for priority, job_id in ids:
        with app.engine.begin() as conn:
            conn.execute(store.jobs.q.update().where(store.jobs.q.c.id == job_id)
                         .values(priority=priority))
    order = []
    while (report := app.executor.run_next("default")) is not None:
        order.append(report.id)
    assert order == [job_id for _, job_id in sorted(ids)]


def test_queues_are_separate(make_app):
    app = make_app(clock=FrozenClock(T0))
    a = queue.dispatch("test.shape.execute", {"shape": "true"}, queue="a")
    assert app.executor.run_next("default") is None
    assert app.executor.run_next("a").id == a


def test_a_row_is_claimed_once(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "true"})
    lease = app.executor.lease_seconds
    with app.engine.begin() as conn:
        first = store.claim_by_id(conn, job_id, T0, "w:1", lease)
    with app.engine.begin() as conn:
        second = store.claim_by_id(conn, job_id, T0, "w:2", lease)
        assert store.claim_next(conn, "default", T0, "w:2", lease) is None
    assert first["status"] == "running" and first["attempts"] == 1
    assert second is None
    row = queue.get(job_id)
    assert row["worker_id"] == "w:1" and row["attempts"] == 1


def test_stale_run_cannot_overwrite_a_newer_run(make_app):
    """A worker whose lease was taken finishes late: its outcome is dropped."""
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "true"})
    lease = app.executor.lease_seconds
    with app.engine.begin() as conn:
        store.claim_by_id(conn, job_id, T0, "old:1", lease)
        conn.execute(store.jobs.q.update().where(store.jobs.q.c.id == job_id)
                     .values(status="pending"))  # as recover_stale would
        store.claim_by_id(conn, job_id, T0, "new:2", lease)
    with app.engine.begin() as conn:
        assert not store.finish_job(conn, job_id, 1, {"status": "failed"})
        assert store.finish_job(conn, job_id, 2, {"status": "completed"})
    assert queue.get(job_id)["status"] == "completed"
