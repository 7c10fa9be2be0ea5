"""A scheduled task's run is its family: its success and `last_success_at` are the
family's (MIN_SUCCESS_RATIO), and OVERLAP waits for the family's callback too."""

from __future__ import annotations

from datetime import datetime

import pytest
import sqlalchemy as sa

from cronjobs import CronJobHandler, store
from cronjobs.clock import FrozenClock
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue, cronjob_runtime
from cronjobs.testing import drain

T0 = datetime(2026, 3, 2, 9, 0, 5)
FAILING: set[int] = set()  # item numbers that fail


class Nightly(CronJobHandler):
    TYPE = "famtask.nightly.discover"
    FREQUENCY = "hour"
    ISOLATION = "thread"
    MIN_SUCCESS_RATIO = 0.75

    def handle(self, payload, job):
        for n in range(4):
            self.dispatch("famtask.nightly.execute", {"n": n})
        return True

    def on_complete(self, family, job):
        return True


class NightlyItem(CronJobHandler):
    TYPE = "famtask.nightly.execute"
    ISOLATION = "thread"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        if payload["n"] in FAILING:
            raise RuntimeError(f"item {payload['n']}")
        return True


@pytest.fixture
def app(make_app):
    FAILING.clear()
    app = make_app(clock=FrozenClock(T0))
    for cls in (Nightly, NightlyItem):
        app.handlers.register(cls.TYPE, cls)
    return app


def runtime(app) -> dict:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == "famtask-nightly")).mappings().one())


def started(app) -> list[int]:
    return [j for t, _, j in tick(app=app).started if t == "famtask-nightly"]


def test_success_follows_the_family_with_its_ratio(app):
    FAILING.update({0})  # 3 of 4 complete: 0.75 is enough
    [root] = started(app)
    drain(app, ["default"])
    state = runtime(app)
    assert state["last_status"] == "completed" and state["last_success_at"] == T0
    app.clock.advance(3600)
    FAILING.update({1})  # 2 of 4: a failure, though the discover row itself completed
    [second] = started(app)
    drain(app, ["default"])
    state = runtime(app)
    assert state["last_job_id"] == second
    assert state["last_status"] == "failed" and state["last_success_at"] == T0
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(cronjob_queue.c.status).where(
            cronjob_queue.c.id == second)).scalar_one() == "completed"
    assert root != second


def test_overlap_waits_for_the_family_callback(app):
    [root] = started(app)
    with app.engine.begin() as conn:  # the callback's type is paused: it waits, pending
        store.flow.pause(conn, "type", "famtask.nightly.complete", now=T0, by="test")
    drain(app, ["default"])  # the discover and its 4 children
    with app.engine.connect() as conn:
        callback = conn.execute(sa.select(cronjob_queue.c.id, cronjob_queue.c.status).where(
            cronjob_queue.c.parent_id == root,
            cronjob_queue.c.idempotency_key.like("family:%"))).one()
    assert callback.status == "pending"
    app.clock.advance(3600)
    report = tick(app=app)
    assert report.skipped.get("famtask-nightly") == "running", report  # OVERLAP "skip"
    with app.engine.begin() as conn:
        store.flow.resume(conn, "type", "famtask.nightly.complete")
    drain(app, ["default"])  # the callback runs: the next slot starts
    app.clock.advance(3600)
    assert len(started(app)) == 1
