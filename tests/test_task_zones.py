"""A task's own zone (`TIMEZONE`, `[tasks.x] timezone`), `JITTER` and `SPREAD`: slots as
cronsim fires them in each task's zone across DST, deterministic offsets on the slot's row
(the same for every scheduler and after a restart), hourly tasks spread over the hour,
and the next run shown in the task's zone, never in the past."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from cronsim import CronSim

from conftest import cli_env
from cronjobs import CronJobHandler
from cronjobs import app as app_module
from cronjobs.cli import main
from cronjobs.clock import FrozenClock
from cronjobs.config import Settings
from cronjobs.errors import HandlerError
from cronjobs.schedule.jitter import offset_seconds
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.slots import cron_key, slot_start
from cronjobs.schedule.taskrows import cli_row, task_rows
from cronjobs.schedule.tasks import run_at, task_infos
from cronjobs.store.models import cronjob_queue

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
QUIET = {name: {"enabled": False} for name in (
    "cronjobs-cleanup", "cronjobs-health", "cronjobs-recoverstale", "http-uptime",
    "tls-certexpiry")}


class BerlinDiscover(CronJobHandler):
    TYPE = "test.berlin.discover"
    FREQUENCY = "30 2 * * *"
    TIMEZONE = "Europe/Berlin"
    OVERLAP = "allow"

    def handle(self, payload, job):
        return True


class NewYorkDiscover(CronJobHandler):
    TYPE = "test.newyork.discover"
    FREQUENCY = "30 2 * * *"
    TIMEZONE = "America/New_York"
    OVERLAP = "allow"

    def handle(self, payload, job):
        return True


class JitterDiscover(CronJobHandler):
    TYPE = "test.jitter.discover"
    FREQUENCY = "*/10 * * * *"
    JITTER = 300
    OVERLAP = "allow"

    def handle(self, payload, job):
        return True


def _fires(zone: str, start: datetime, end: datetime) -> list[datetime]:
    """cronsim's fires of `30 2 * * *` in `zone` between two naive UTC instants."""
    out = []
    for fire in CronSim("30 2 * * *", start.replace(tzinfo=UTC).astimezone(ZoneInfo(zone))):
        at = fire.astimezone(UTC).replace(tzinfo=None)
        if at > end:
            return out
        out.append(at)
    return out


def _rows(app, type_: str) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(cronjob_queue.c.payload, cronjob_queue.c.scheduled_at)
            .where(cronjob_queue.c.type == type_).order_by(cronjob_queue.c.id)).mappings()]


@SQLITE
def test_two_zones_in_one_registry_fire_as_cronsim_across_both_2027_transitions(make_app):
    clock = FrozenClock(datetime(2027, 3, 13, 0, 0))
    app = make_app(clock=clock, tasks=QUIET, handler_paths=())  # the settings' zone stays UTC
    for cls in (BerlinDiscover, NewYorkDiscover):
        app.handlers.register(cls.TYPE, cls)
    # Each transition day (US: 14 Mar / 7 Nov; EU: 28 Mar / 31 Oct 2027): a tick every 10
    # minutes over its night (00:00-09:00 UTC holds 02:30 in both zones) and one at each
    # fire of the days around; every tick must start the latest fire cronsim gives, once.
    started: dict[str, list[str]] = {"test-berlin": [], "test-newyork": []}
    expected: dict[str, set[str]] = {"test-berlin": set(), "test-newyork": set()}
    zones = {"test-berlin": "Europe/Berlin", "test-newyork": "America/New_York"}
    for day in (datetime(2027, 3, 14), datetime(2027, 3, 28), datetime(2027, 10, 31),
                datetime(2027, 11, 7)):
        fires = {task: _fires(zone, day - timedelta(days=2), day + timedelta(days=2))
                 for task, zone in zones.items()}
        near = {at for f in fires.values() for at in f if abs(at - day) < timedelta(days=1)}
        ticks = sorted({day + timedelta(minutes=10 * n) for n in range(55)} | near)
        for now in ticks:
            clock.set(now)
            report = tick(now, app=app)
            for task, key, _ in report.started:
                if task in started:
                    started[task].append(key)
            for task, zone in zones.items():
                if report.skipped.get(task) == "not-yet":
                    continue  # a new cron task waits for its first fire (as ever)
                latest = max(at for at in fires[task] if at <= now)
                expected[task].add(cron_key(latest, ZoneInfo(zone)))
                assert slot_start("30 2 * * *", cron_key(latest, ZoneInfo(zone)), zone) == latest
    assert {task: set(keys) for task, keys in started.items()} == expected
    assert all(len(keys) == len(set(keys)) for keys in started.values())  # each slot once
    # cron's rule: the skipped 02:30 runs once at 03:00, the repeated one once (first pass)
    assert "202703280300" in started["test-berlin"] and "202703140300" in started["test-newyork"]
    assert "202710310230" in started["test-berlin"] and "202711070230" in started["test-newyork"]
    assert not any(len(key) > 12 for keys in started.values() for key in keys)


@MARIADB
def test_jitter_300_three_schedulers_100_slots_same_offsets_after_a_restart(make_app):
    t0 = datetime(2027, 1, 4, 0, 0, 5)
    apps = [make_app(clock=FrozenClock(t0), tasks=QUIET, handler_paths=()) for _ in range(3)]
    for app in apps:
        app.handlers.register(JitterDiscover.TYPE, JitterDiscover)
    for n in range(100):
        now = t0 + timedelta(minutes=10 * n)
        for app in apps:
            app.clock.set(now)
            tick(now, app=app)
    rows = _rows(apps[0], JitterDiscover.TYPE)
    assert len(rows) == 100
    offsets = {}
    for row in rows:
        key = json.loads(row["payload"])["slot"]
        offsets[key] = (row["scheduled_at"] - slot_start("*/10 * * * *", key)).total_seconds()
    assert len(offsets) == 100 and all(0 <= o < 300 for o in offsets.values())
    assert len(set(offsets.values())) > 50  # a hash per slot, not one offset for all
    restarted = make_app(clock=FrozenClock(t0), tasks=QUIET, handler_paths=())  # a restart
    restarted.handlers.register(JitterDiscover.TYPE, JitterDiscover)
    for app in (*apps, restarted):
        info = next(i for i in task_infos(app) if i.task == "test-jitter")
        for key, offset in offsets.items():
            at = slot_start("*/10 * * * *", key)
            slot = type("S", (), {"key": key, "at": at, "next_at": at + timedelta(minutes=10)})
            assert (run_at(info, slot) - at).total_seconds() == offset
    tick(t0 + timedelta(minutes=990), app=restarted)  # the last slot again: nothing new
    assert len(_rows(restarted, JitterDiscover.TYPE)) == 100


@SQLITE
def test_fifty_hourly_tasks_with_spread_use_at_least_25_minutes(make_app):
    now = datetime(2027, 2, 1, 9, 0, 5)
    app = make_app(clock=FrozenClock(now), tasks=QUIET, handler_paths=())
    for n in range(50):
        cls = type(f"Hourly{n}Discover", (CronJobHandler,), {
            "TYPE": f"test.hourly{n}.discover", "FREQUENCY": "hour", "SPREAD": True,
            "handle": lambda self, payload, job: True})
        app.handlers.register(cls.TYPE, cls)
    report = tick(now, app=app)
    assert len([t for t, _, _ in report.started if t.startswith("test-hourly")]) == 50
    with app.engine.connect() as conn:
        times = [r.scheduled_at for r in conn.execute(sa.select(cronjob_queue.c.scheduled_at)
                                                      .where(cronjob_queue.c.type.like("test.hourly%")))]
    assert all(datetime(2027, 2, 1, 9) <= at < datetime(2027, 2, 1, 10) for at in times)
    assert len({at.minute for at in times}) >= 25
    # the same task keeps its minute every hour (an offset per task, not per slot)
    assert offset_seconds("test-hourly7", "2027020109", spread=True, period=3600) == \
        offset_seconds("test-hourly7", "2027020110", spread=True, period=3600)


def test_spread_and_jitter_together_stay_below_the_period():
    for n in range(200):
        offset = offset_seconds(f"t{n}", "202701010000", jitter=300, spread=True, period=600)
        assert 0 <= offset < 600


@SQLITE
def test_next_run_is_shown_in_the_tasks_zone_with_jitter_and_never_in_the_past(make_app):
    now = datetime(2027, 3, 27, 23, 0)  # the Berlin fire is at 01:00 UTC (03:00 CEST)
    app = make_app(clock=FrozenClock(now), tasks={**QUIET, "test-jitter": {"jitter": "2m"}},
                   handler_paths=())
    for cls in (BerlinDiscover, JitterDiscover):
        app.handlers.register(cls.TYPE, cls)
    rows = {r.task: r for r in task_rows(app)}
    berlin = rows["test-berlin"]
    assert berlin.timezone == "Europe/Berlin" and berlin.next_run_at == datetime(2027, 3, 28, 1)
    assert cli_row(berlin)["next_run_at"] == "2027-03-28 03:00:00 CEST"
    assert berlin.next_run_local == "2027-03-28 03:00:00 CEST (Europe/Berlin)"
    jit = rows["test-jitter"]
    assert jit.jitter == 120 and now < jit.next_run_at < now + timedelta(minutes=12)
    # the scheduler down for a day: the next run is still ahead, not "a day ago"
    app.clock.set(now + timedelta(days=1, minutes=3))
    later = {r.task: r for r in task_rows(app)}
    assert later["test-berlin"].next_run_at > app.clock.now()
    assert later["test-jitter"].next_run_at > app.clock.now()


@SQLITE
def test_cronjobs_tasks_shows_the_next_run_in_the_zone_of_the_settings(db_url, tmp_path):
    config = tmp_path / "cronjobs.toml"
    config.write_text('[tasks.tls-certexpiry]\ntimezone = "Asia/Tokyo"\n')
    env = cli_env(db_url, CRONJOBS_CONFIG=str(config))
    root = logging.getLogger()  # the command sets logging up: put it back for later tests
    handlers, level = root.handlers[:], root.level
    try:
        done = CliRunner().invoke(main, ["tasks", "--json"], env=env, catch_exceptions=False)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        app_module.current().close()  # the command's App, installed as the current one
        app_module.use(None)
    assert done.exit_code == 0, done.output
    row = next(r for r in json.loads(done.stdout) if r["task"] == "tls-certexpiry")
    assert row["timezone"] == "Asia/Tokyo" and row["next_run_local"].endswith(" JST (Asia/Tokyo)")
    # a day's slot is a UTC day: its next run is 00:00 UTC, 09:00 in Tokyo
    assert row["next_run_local"][11:] == "09:00:00 JST (Asia/Tokyo)"
    assert datetime.fromisoformat(row["next_run_at"]).replace(tzinfo=None) > \
        datetime.now(UTC).replace(tzinfo=None)


def test_a_bad_zone_or_jitter_is_one_line_naming_it():
    class Bad(CronJobHandler):
        TYPE = "test.badzone.discover"
        FREQUENCY = "0 9 * * *"
        TIMEZONE = "Mars/Olympus"

        def handle(self, payload, job):
            return True

    from registry import check_class
    with pytest.raises(HandlerError, match="TIMEZONE 'Mars/Olympus' is not a known"):
        check_class(Bad.TYPE, Bad)
    Bad.TIMEZONE, Bad.JITTER = "UTC", "soon"
    with pytest.raises(HandlerError, match="JITTER must be a duration.*'soon'"):
        check_class(Bad.TYPE, Bad)
    with pytest.raises(ValueError, match="timezone 'Nowhere/Land' is not a known"):
        Settings(tasks={"x": {"timezone": "Nowhere/Land"}})
    with pytest.raises(ValueError, match="jitter must be a duration"):
        Settings(tasks={"x": {"jitter": "-5m"}})


class SkippingDiscover(CronJobHandler):
    TYPE = "test.skipping.discover"
    FREQUENCY = "minute"  # OVERLAP "skip": a slot while the last run is pending is skipped

    def handle(self, payload, job):
        return True


@SQLITE
def test_a_skipped_last_slot_says_why_and_the_next_run_is_still_ahead(make_app):
    now = datetime(2027, 2, 1, 9, 0, 5)
    app = make_app(clock=FrozenClock(now), tasks=QUIET, handler_paths=())
    app.handlers.register(SkippingDiscover.TYPE, SkippingDiscover)
    assert "test-skipping" in [t for t, _, _ in tick(now, app=app).started]
    later = now + timedelta(minutes=1)
    app.clock.set(later)
    assert tick(later, app=app).skipped["test-skipping"] == "running"  # 09:00 still pending
    row = next(r for r in task_rows(app) if r.task == "test-skipping")
    assert row.last_slot_skipped == "running" and row.last_skipped_slot == "202702010901"
    assert row.next_run_at == datetime(2027, 2, 1, 9, 2)  # not the skipped 09:01
    assert cli_row(row)["next_run_at"] == "2027-02-01 09:02:00 UTC"
