"""`tick(now)` starts each due task once per slot, on every backend."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from conftest import effect_rows
from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock
from cronjobs.errors import HandlerNotFound
from cronjobs.schedule.manual import run_now
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.tasks import set_enabled
from cronjobs.store.models import cronjob_queue, cronjob_runtime, cronjob_slot
from cronjobs.testing import drain

T0 = datetime(2026, 1, 5, 12, 0, 5)
BUILTIN_TASKS = {"cronjobs-cleanup", "cronjobs-health", "cronjobs-recoverstale", "tls-certexpiry"}
DESTRUCTIVE_BUILTINS = {"db-backup"}  # ship disabled: every tick skips them
IDLE_BUILTINS = {"http-uptime"}  # no uptime URL configured (and not in serve): idle


class UnavailableDiscover(CronJobHandler):
    TYPE = "test.unavailable.discover"
    FREQUENCY = "minute"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    @classmethod
    def available(cls) -> bool:
        return False

    def handle(self, payload, job):
        raise AssertionError("an unavailable handler must never be started")


class BrokenCheckDiscover(CronJobHandler):
    TYPE = "test.brokencheck.discover"
    FREQUENCY = "minute"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    @classmethod
    def available(cls) -> bool:
        raise RuntimeError("cannot tell")

    def handle(self, payload, job):
        raise AssertionError("never started")


class NightlyDiscover(CronJobHandler):
    TYPE = "test.nightly.discover"
    FREQUENCY = "15 3 * * *"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True


class PurgeExecute(CronJobHandler):
    TYPE = "test.purge.execute"
    FREQUENCY = "day"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does
    DESTRUCTIVE = True

    def handle(self, payload, job):
        return True


def count_started(report, task: str = "test-count") -> list[str]:
    """Slot keys of `task` started by one tick."""
    return [slot for t, slot, _ in report.started if t == task]


def runtime(app, task: str = "test-count") -> dict:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(cronjob_runtime)
                                 .where(cronjob_runtime.c.task == task)).mappings().one())


def slot_keys(app, task: str = "test-count") -> list[str]:
    with app.engine.connect() as conn:
        return list(conn.execute(sa.select(cronjob_slot.c.slot).where(cronjob_slot.c.task == task)
                                 .order_by(cronjob_slot.c.slot)).scalars())


def count_rows(app) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(cronjob_queue).where(cronjob_queue.c.type == "test.count.discover")
            .order_by(cronjob_queue.c.id)).mappings()]


def test_tick_starts_each_due_task_once_then_already_run(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)

    first = tick(T0)

    assert {t for t, _, _ in first.started} == BUILTIN_TASKS | {"test-count"}
    assert first.skipped == {**dict.fromkeys(DESTRUCTIVE_BUILTINS, "disabled"),
                             **dict.fromkeys(IDLE_BUILTINS, "idle")}
    assert count_started(first) == ["202601051200"]
    [(_, _, job_id)] = [s for s in first.started if s[0] == "test-count"]
    row = queue.get(job_id)
    assert row["status"] == "pending"
    assert row["idempotency_key"] == "cronjobs:test-count:202601051200"
    assert row["payload"] == '{"slot": "202601051200"}'
    state = runtime(app)
    assert state["last_slot"] == "202601051200"
    assert state["last_job_id"] == job_id
    assert state["last_run_at"] == T0
    assert state["next_run_at"] == datetime(2026, 1, 5, 12, 1)

    clock.set(T0 + timedelta(seconds=50))
    second = tick(T0 + timedelta(seconds=50))

    assert second.started == []
    assert second.skipped["test-count"] == "already-run"
    assert second.skipped == {**dict.fromkeys(BUILTIN_TASKS | {"test-count"}, "already-run"),
                              **dict.fromkeys(DESTRUCTIVE_BUILTINS, "disabled"),
                              **dict.fromkeys(IDLE_BUILTINS, "idle")}
    assert len(count_rows(app)) == 1
    assert slot_keys(app) == ["202601051200"]


def test_ten_consecutive_minutes_start_ten_runs(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    started = []
    for i in range(10):
        now = T0 + timedelta(minutes=i)
        clock.set(now)
        started += count_started(tick(now))
        started += count_started(tick(now + timedelta(seconds=30)))  # a second tick: nothing
    expected = [f"2026010512{i:02d}" for i in range(10)]
    assert started == expected
    assert slot_keys(app) == expected
    assert len(count_rows(app)) == 10


def test_missed_minutes_are_coalesced_into_one_run_and_logged(make_app, caplog):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    tick(T0)
    later = datetime(2026, 1, 5, 12, 30, 5)
    clock.set(later)

    with caplog.at_level(logging.INFO, logger="cronjobs.schedule.scheduler"):
        report = tick(later)

    assert count_started(report) == ["202601051230"]          # one run, not 30
    assert slot_keys(app) == ["202601051200", "202601051230"]
    assert len(count_rows(app)) == 2
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert ("task test-count: 29 missed slot(s) after 202601051200 coalesced into 202601051230"
            in messages)


def test_kill_switch_skips_the_task_as_disabled(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    set_enabled("test-count", False)

    report = tick(T0)

    assert report.skipped["test-count"] == "disabled"
    assert count_started(report) == []
    assert runtime(app)["enabled"] in (False, 0)
    assert slot_keys(app) == []

    set_enabled("test-count", True)
    assert count_started(tick(T0 + timedelta(seconds=1))) == ["202601051200"]


def test_kill_switch_of_an_unknown_task_is_an_error(make_app):
    make_app(clock=FrozenClock(T0))
    with pytest.raises(HandlerNotFound, match="no-such-task"):
        set_enabled("no-such-task", False)
    with pytest.raises(HandlerNotFound, match="no-such-task"):
        run_now("no-such-task")


def test_unavailable_handler_is_skipped(make_app, caplog):
    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(UnavailableDiscover.TYPE, UnavailableDiscover)
    app.handlers.register(BrokenCheckDiscover.TYPE, BrokenCheckDiscover)

    with caplog.at_level(logging.WARNING, logger="cronjobs.schedule.scheduler"):
        report = tick(T0)

    assert report.skipped["test-unavailable"] == "unavailable"
    assert report.skipped["test-brokencheck"] == "unavailable"
    assert any("RuntimeError: cannot tell" in r.getMessage() for r in caplog.records)
    assert count_started(report) == ["202601051200"]   # the others still run
    assert slot_keys(app, "test-unavailable") == []


def test_frequency_from_settings_overrides_the_class(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, tasks={"test-count": {"frequency": "hour"}})

    assert count_started(tick(T0)) == ["2026010512"]
    for minute in (1, 30, 59):
        now = T0 + timedelta(minutes=minute)
        clock.set(now)
        assert tick(now).skipped["test-count"] == "already-run"
    now = datetime(2026, 1, 5, 13, 0, 1)
    clock.set(now)
    assert count_started(tick(now)) == ["2026010513"]
    assert runtime(app)["next_run_at"] == datetime(2026, 1, 5, 14, 0)
    assert slot_keys(app) == ["2026010512", "2026010513"]


def test_new_cron_task_waits_for_its_fire_time(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    app.handlers.register(NightlyDiscover.TYPE, NightlyDiscover)

    # 12:00: today's 03:15 is past; a new task does not run it late.
    assert tick(T0).skipped["test-nightly"] == "not-yet"
    for now in (datetime(2026, 1, 5, 23, 59), datetime(2026, 1, 6, 3, 14, 59)):
        clock.set(now)
        assert tick(now).skipped["test-nightly"] == "not-yet"
    assert slot_keys(app, "test-nightly") == []

    fire = datetime(2026, 1, 6, 3, 15, 2)
    clock.set(fire)
    assert count_started(tick(fire), "test-nightly") == ["202601060315"]
    assert tick(fire + timedelta(seconds=30)).skipped["test-nightly"] == "already-run"
    assert runtime(app, "test-nightly")["next_run_at"] == datetime(2026, 1, 7, 3, 15)

    # once it has run, a missed fire time is caught up (coalesced) at the next tick
    late = datetime(2026, 1, 8, 9, 0)
    clock.set(late)
    assert count_started(tick(late), "test-nightly") == ["202601080315"]


def test_manual_run_does_not_move_the_schedule(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)

    manual_id = run_now("test-count").id

    manual = queue.get(manual_id)
    assert manual["type"] == "test.count.discover"
    assert manual["payload"] == '{"manual": true}'
    state = runtime(app)
    assert (state["last_manual_job_id"], state["last_job_id"]) == (manual_id, None)
    assert state["last_slot"] is None and state["last_run_at"] is None
    assert manual["priority"] == 1

    report = tick(T0 + timedelta(seconds=10))  # the same minute still runs as planned
    assert count_started(report) == ["202601051200"]

    clock.set(T0 + timedelta(seconds=20))
    run_now("test-count", again=True)  # the first manual run is still pending
    assert runtime(app)["last_slot"] == "202601051200"
    assert count_started(tick(T0 + timedelta(seconds=30))) == []
    assert count_started(tick(T0 + timedelta(minutes=1))) == ["202601051201"]
    assert len(count_rows(app)) == 4   # 2 manual + 2 scheduled


def test_slot_claim_survives_deletion_of_the_cancelled_row(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    [(_, _, job_id)] = [s for s in tick(T0).started if s[0] == "test-count"]

    assert len(drain(app)) >= 1
    assert queue.get(job_id) is None                      # cancelled + childless = deleted
    assert [r["info"] for r in effect_rows(app, "count")] == ["202601051200"]

    again = tick(T0 + timedelta(seconds=40))
    assert count_started(again) == []
    assert again.skipped["test-count"] == "already-run"

    # Even with the runtime row's last_slot lost, the (task, slot) record says "done".
    with app.engine.begin() as conn:
        conn.execute(cronjob_runtime.update().where(cronjob_runtime.c.task == "test-count")
                     .values(last_slot=None))
    third = tick(T0 + timedelta(seconds=50))
    assert count_started(third) == []
    assert third.skipped["test-count"] == "lost-race"
    assert len(drain(app)) == 0
    assert len(effect_rows(app, "count")) == 1


def test_losing_the_slot_race_logs_nothing_above_debug(make_app, caplog):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    tick(T0)
    with app.engine.begin() as conn:  # as if another scheduler won after we read the runtime
        conn.execute(cronjob_runtime.update().values(last_slot=None))
        # (and the runs it started had ended: the overlap check lets them through)
        conn.execute(cronjob_queue.update().values(status="completed"))

    with caplog.at_level(logging.DEBUG, logger="cronjobs"):
        report = tick(T0 + timedelta(seconds=1))

    assert report.started == []
    assert report.skipped == {**dict.fromkeys(BUILTIN_TASKS | {"test-count"}, "lost-race"),
                              **dict.fromkeys(DESTRUCTIVE_BUILTINS, "disabled"),
                              **dict.fromkeys(IDLE_BUILTINS, "idle")}
    assert any("already claimed" in r.getMessage() and r.levelno == logging.DEBUG
               for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG] == []


def test_destructive_task_ships_disabled(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    app.handlers.register(PurgeExecute.TYPE, PurgeExecute)

    report = tick(T0)

    assert report.skipped["test-purge"] == "disabled"
    assert runtime(app, "test-purge")["enabled"] in (False, 0)
    assert runtime(app)["enabled"] in (True, 1)      # ordinary tasks ship enabled
    set_enabled("test-purge", True)
    assert count_started(tick(T0 + timedelta(seconds=1)), "test-purge") == ["20260105"]


def test_settings_can_ship_a_destructive_task_enabled(make_app):
    app = make_app(clock=FrozenClock(T0), tasks={"test-purge": {"enabled": True},
                                                  "test-count": {"enabled": False}})
    app.handlers.register(PurgeExecute.TYPE, PurgeExecute)

    report = tick(T0)

    assert count_started(report, "test-purge") == ["20260105"]
    assert report.skipped["test-count"] == "disabled"
    assert runtime(app, "test-purge")["enabled"] in (True, 1)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_cron_in_the_repeated_dst_hour_runs_in_both_passes(make_app):
    """Europe/Berlin, 2026-10-25: 02:00 and 02:30 happen twice; `*/30 * * * *` keeps its
    30-minute interval and runs at each of the eight instants of four real hours."""
    start = datetime(2026, 10, 24, 23, 0)   # 01:00 CEST
    clock = FrozenClock(start)
    app = make_app(clock=clock, timezone="Europe/Berlin",
                   tasks={"test-count": {"frequency": "*/30 * * * *"}})
    started = []
    reasons = set()
    for minute in range(0, 240, 5):        # until 03:00 UTC = 04:00 CET
        now = start + timedelta(minutes=minute)
        clock.set(now)
        report = tick(now)
        started += count_started(report)
        reasons.add(report.skipped.get("test-count"))
    assert started == ["202610250100", "202610250130", "202610250200", "202610250230",
                       "202610250200+0100", "202610250230+0100", "202610250300",
                       "202610250330"]
    assert [row["created_at"] for row in count_rows(app)] == [
        start + timedelta(minutes=30 * n) for n in range(8)]
    assert reasons == {None, "already-run"}
