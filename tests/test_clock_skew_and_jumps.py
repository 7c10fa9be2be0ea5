"""Clock skew between hosts and clock jumps on one host.

Leases and heartbeats are written and judged with the database's clock, so a host whose
clock is an hour ahead (or behind) neither takes rows from a live worker nor declares it
dead. A tick after a 10-year jump counts the skipped slots by arithmetic; a clock that goes
back is said once, at WARNING, and no older slot is started.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from cronjobs import CronJobHandler, queue, store
from cronjobs.app import App
from cronjobs.clock import FrozenClock, utcnow
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue as q
from cronjobs.worker import heartbeat

HOUR = timedelta(hours=1)


def second_app(app: App, clock) -> App:
    """Another host's view of the same system: same settings and database, its own clock."""
    return App(app.settings, clock=clock, handlers=app.handlers)


def test_a_host_an_hour_ahead_takes_no_live_row(make_app):
    worker_host = make_app(clock=FrozenClock(utcnow()))
    judge = second_app(worker_host, FrozenClock(utcnow() + HOUR))
    try:
        job_id = queue.dispatch("test.shape.execute", {"shape": "dict_ok"}, app=worker_host)
        runner = InlineRunner(Executor(worker_host))
        row = runner.claim("default")
        assert row["id"] == job_id
        assert queue.recover_stale(5, app=judge) == 0, "the live lease is judged by the DB clock"
        assert queue.recover_stale(0, app=judge) == 0
        report = runner.run_claimed(row)
        assert report.status == "completed", "the live worker's outcome is kept"
        assert queue.get(job_id, ["attempts"], app=worker_host)["attempts"] == 1, "ran once"
    finally:
        judge.close()


def test_a_worker_an_hour_behind_keeps_its_lease_by_renewing(make_app):
    worker_host = make_app(clock=FrozenClock(utcnow() - HOUR))
    judge = second_app(worker_host, FrozenClock(utcnow()))
    try:
        job_id = queue.dispatch("test.shape.execute", {"shape": "true"}, app=worker_host)
        executor = Executor(worker_host)
        row = InlineRunner(executor).claim("default")
        executor._running[job_id] = (row["attempts"], 60.0)
        assert executor.renew_leases() == 1
        assert queue.recover_stale(0, app=judge) == 0
    finally:
        judge.close()


def test_a_dead_lease_is_still_taken_whatever_the_host_clocks(make_app):
    worker_host = make_app(clock=FrozenClock(utcnow()))
    judge = second_app(worker_host, FrozenClock(utcnow() - HOUR))  # even a host behind
    try:
        job_id = queue.dispatch("test.shape.execute", {}, app=worker_host)
        InlineRunner(Executor(worker_host)).claim("default")
        with worker_host.engine.connect() as conn:
            expired = store.database_now(conn) - timedelta(minutes=10)
        with worker_host.engine.begin() as conn:
            conn.execute(q.update().where(q.c.id == job_id).values(locked_until=expired))
        assert queue.recover_stale(5, app=judge) == 1
        assert queue.get(job_id, ["status"], app=judge)["status"] == "pending"
    finally:
        judge.close()


def test_heartbeats_are_judged_by_the_database_clock(make_app):
    ahead = make_app(clock=FrozenClock(utcnow() + HOUR))
    behind = second_app(ahead, FrozenClock(utcnow() - HOUR))
    try:
        heartbeat.beat(ahead, "ahead:1", ["default"], "running", 0, [])
        heartbeat.beat(behind, "behind:2", ["default"], "running", 0, [])
        for judge in (ahead, behind):
            seen = heartbeat.view(judge)
            assert {w["id"] for w in seen.live} == {"ahead:1", "behind:2"}
            assert seen.dead == [] and all(w["age_seconds"] < 30 for w in seen.live)
    finally:
        behind.close()


class _Every5:
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        return True


def _register_every5(app: App, count: int = 3) -> None:
    for i in range(count):
        cls = type(f"Every5No{i}Discover", (_Every5, CronJobHandler),
                   {"TYPE": f"test.every5no{i}.discover", "FREQUENCY": "*/5 * * * *",
                    "OVERLAP": "allow"})  # slot tests: every slot starts
        app.handlers.register(cls.TYPE, cls)


def test_a_ten_year_jump_counts_skipped_slots_cheaply(make_app, caplog):
    t0 = datetime(2026, 6, 1, 12, 0, 30)
    clock = FrozenClock(t0)
    app = make_app(clock=clock)
    _register_every5(app)
    tick(app=app)
    tick(app=app, now=t0 + timedelta(minutes=5))
    clock.set(t0 + timedelta(days=3653, minutes=5))
    with caplog.at_level(logging.INFO, logger="cronjobs.schedule.scheduler"):
        report = tick(app=app)
    started = {task for task, _, _ in report.started}
    assert {"test-every5no0", "test-every5no1", "test-every5no2", "test-count"} <= started
    # 3,653 days of minutes less one: named frequencies are counted exactly, by arithmetic
    # (walking 5 million minutes would take seconds); cron expressions are walked up to 1,000.
    assert "task test-count: 5260319 missed slot(s)" in caplog.text, caplog.text
    assert "task test-every5no0: 1000+ missed slot(s)" in caplog.text


def test_a_clock_that_goes_back_is_said_once_and_starts_no_older_slot(make_app, caplog):
    t0 = datetime(2026, 6, 1, 12, 0, 30)
    clock = FrozenClock(t0)
    app = make_app(clock=clock)
    _register_every5(app, 1)
    first = tick(app=app)
    assert first.started
    clock.set(t0 - HOUR)
    with caplog.at_level(logging.DEBUG, logger="cronjobs.schedule.scheduler"):
        for minutes in range(3):
            report = tick(app=app, now=t0 - HOUR + timedelta(minutes=minutes))
            assert not report.started
            assert set(report.skipped.values()) <= {"older-slot", "already-run", "disabled",
                                                    "unavailable", "idle"}
            assert report.skipped["test-count"] == "older-slot"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "the clock went back" in warnings[0].getMessage()
    assert "lost race" not in caplog.text and "already claimed" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cronjobs.schedule.scheduler"):
        later = tick(app=app, now=t0 + timedelta(minutes=5))
    assert {t for t, _, _ in later.started} >= {"test-count", "test-every5no0"}
    assert caplog.records == [], "runs resume without another warning"


def test_a_late_tick_skips_an_older_slot_without_a_warning(make_app, caplog):
    """Another scheduler already ran minute 12:05 when this one's tick for 12:03 gets
    there (a slow tick; the host clock is fine): the older slot is skipped quietly."""
    t0 = datetime(2026, 6, 1, 12, 5, 30)
    app = make_app(clock=FrozenClock(t0))
    assert tick(app=app).started
    with caplog.at_level(logging.DEBUG, logger="cronjobs.schedule.scheduler"):
        report = tick(app=app, now=t0 - timedelta(minutes=2))
    assert report.skipped["test-count"] == "older-slot" and not report.started
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "is older than its last slot 202606011205 (a late tick)" in caplog.text
