"""Missed runs (`CATCHUP`): a `*/5` task whose scheduler was down 3 hours starts 12 rows
with `all` and a 1 h window (exactly once across two schedulers on MariaDB and
PostgreSQL), 0 with `none` (36 slots recorded `missed`, the next slot on time), 1 with
`latest`; the rules checked at registration and in `[tasks.x]`."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from cronjobs import CronJobHandler
from cronjobs.clock import FrozenClock
from cronjobs.config.tables import TaskSettings
from cronjobs.errors import HandlerError
from cronjobs.schedule.catchup import Catchup, catchup_of, plan
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.slots import current_slot
from cronjobs.store.models import cronjob_dependency, cronjob_queue, cronjob_runtime
from cronjobs.testing import drain

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
T0 = datetime(2026, 3, 2, 10, 0, 0)
DOWN = T0 + timedelta(hours=3, minutes=2)  # the scheduler comes back at 13:02


class EveryFive(CronJobHandler):
    TYPE = "cu.five.discover"
    FREQUENCY = "*/5 * * * *"
    QUEUE = "cu"

    def handle(self, payload, job):
        return True


def handler(catchup: str, **constants) -> type:
    return type("Five", (EveryFive,), {"CATCHUP": catchup, **constants})


def setup(make_app, cls: type, **settings):
    """An app with `cls` that ran its 10:00 slot, the run completed."""
    clock = FrozenClock(T0)
    app = make_app(clock=clock, handler_paths=(), **settings)
    app.handlers.register(cls.TYPE, cls)
    assert mine(tick(T0, app=app)) == ["202603021000"]
    drain(app, ["cu"])
    return app, clock


def mine(report) -> list[str]:
    """The slot keys the tick started for task `cu-five`, in the order it reports them."""
    return [slot for task, slot, _ in report.started if task == "cu-five"]


def scheduled(app) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(cronjob_queue.c.id, cronjob_queue.c.idempotency_key,
                      cronjob_queue.c.status).where(cronjob_queue.c.type == EveryFive.TYPE)
            .order_by(cronjob_queue.c.id)).mappings()]


def runtime(app) -> dict:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == "cu-five")).mappings().one())


@SQLITE
def test_all_starts_the_window_once_chained_in_slot_order(make_app):
    app, clock = setup(make_app, handler("all", CATCHUP_WINDOW="1h"))
    clock.set(DOWN)
    report = tick(DOWN, app=app)
    keys = mine(report)  # in slot order
    assert keys == [f"2026030212{m:02d}" for m in range(5, 60, 5)] + ["202603021300"]
    rows = scheduled(app)[1:]
    assert [r["idempotency_key"] for r in rows] == [f"cronjobs:cu-five:{k}" for k in keys]
    assert [r["status"] for r in rows] == ["pending"] + ["waiting"] * 11
    with app.engine.connect() as conn:
        dep = cronjob_dependency.c
        deps = conn.execute(sa.select(dep.job_id, dep.depends_on_id).order_by(dep.job_id)).all()
    ids = [r["id"] for r in rows]
    assert [tuple(d) for d in deps] == list(zip(ids[1:], ids[:-1], strict=True))
    rt = runtime(app)
    assert (rt["last_slot"], rt["last_job_id"]) == ("202603021300", ids[-1])
    # 10:05 .. 12:00 began more than the window ago: 24 missed for good
    assert (rt["skipped_count"], rt["last_skipped_slot"], rt["last_skip_reason"]) == (
        24, "202603021200", "missed")
    clock.set(DOWN + timedelta(minutes=1))
    again = tick(app=app)
    assert mine(again) == [] and len(scheduled(app)) == 13
    assert runtime(app)["skipped_count"] == 24
    assert len(drain(app, ["cu"])) == 12  # released one after the other


@SQLITE
def test_all_with_a_cap_goes_on_where_it_stopped(make_app):
    app, clock = setup(make_app, handler("all", CATCHUP_WINDOW="1h", CATCHUP_MAX=5,
                                         OVERLAP="allow"))
    clock.set(DOWN)
    started = mine(tick(DOWN, app=app))
    for minute in (1, 2):
        clock.set(DOWN + timedelta(minutes=minute))
        started += mine(tick(app=app))
    assert sorted(started) == [f"2026030212{m:02d}" for m in range(5, 60, 5)] + ["202603021300"]
    assert [r["status"] for r in scheduled(app)[1:]] == ["pending"] * 12  # allow: no chain


@SQLITE
def test_none_starts_nothing_late_and_the_next_slot_on_time(make_app):
    app, clock = setup(make_app, handler("none"))
    clock.set(DOWN)
    report = tick(DOWN, app=app)
    assert mine(report) == [] and report.skipped["cu-five"] == "missed"
    rt = runtime(app)
    assert (rt["skipped_count"], rt["last_skipped_slot"], rt["last_skip_reason"]) == (
        36, "202603021300", "missed")
    clock.set(DOWN + timedelta(minutes=1))
    assert mine(tick(app=app)) == [] and runtime(app)["skipped_count"] == 36
    on_time = T0 + timedelta(hours=3, minutes=5, seconds=40)
    clock.set(on_time)
    assert mine(tick(app=app)) == ["202603021305"]
    assert runtime(app)["skipped_count"] == 36


@SQLITE
def test_latest_starts_one_and_records_the_coalesced_slots(make_app):
    app, clock = setup(make_app, EveryFive)  # the default: latest
    clock.set(DOWN)
    report = tick(DOWN, app=app)
    assert mine(report) == ["202603021300"]
    rt = runtime(app)
    assert (rt["skipped_count"], rt["last_skipped_slot"], rt["last_skip_reason"]) == (
        35, "202603021255", "missed")
    assert len(scheduled(app)) == 2


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_two_schedulers_start_the_catchup_exactly_once(make_app):
    cls = handler("all", CATCHUP_WINDOW="1h")
    app, _ = setup(make_app, cls)
    other = make_app(clock=FrozenClock(DOWN), handler_paths=())
    other.handlers.register(cls.TYPE, cls)
    app.clock.set(DOWN)
    gate, reports = threading.Barrier(2), []

    def run(a):
        gate.wait()
        reports.append(tick(DOWN, app=a))

    threads = [threading.Thread(target=run, args=(a,)) for a in (app, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys = [slot for r in reports for slot in mine(r)]
    assert len(keys) == 12 and len(set(keys)) == 12
    assert len(scheduled(app)) == 13
    assert runtime(app)["skipped_count"] == 24


def test_plan_is_pure_and_counts_like_slots_between():
    slot = current_slot("*/5 * * * *", DOWN)
    rt = {"last_slot": "202603021000", "last_skipped_slot": None}
    latest = plan(Catchup("latest"), "*/5 * * * *", rt, slot, DOWN)
    assert ([s.key for s in latest.start], latest.missed) == (["202603021300"], 35)
    hourly = current_slot("hour", DOWN)
    late = plan(Catchup("none"), "hour", {"last_slot": "2026030210"}, hourly, DOWN)
    assert (late.start, late.missed, late.newest_missed) == ([], 3, "2026030213")
    on_time = plan(Catchup("none"), "hour", {"last_slot": "2026030212"}, hourly,
                   hourly.at + timedelta(seconds=60))
    assert ([s.key for s in on_time.start], on_time.missed) == (["2026030213"], 0)


@pytest.mark.parametrize(("constants", "words"), [
    ({"CATCHUP": "some"}, "CATCHUP must be one of 'latest', 'none', 'all', got 'some'"),
    ({"CATCHUP_WINDOW": "soon"}, "CATCHUP_WINDOW must be a duration"),
    ({"CATCHUP_MAX": 0}, "CATCHUP_MAX must be an integer >= 1, got 0"),
])
def test_bad_constants_are_refused_at_registration(constants, words):
    from registry import check_class

    cls = type("Bad", (EveryFive,), constants)
    with pytest.raises(HandlerError) as err:
        check_class(cls.TYPE, cls)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_task_settings_win_and_are_checked():
    cls = handler("none", CATCHUP_WINDOW="2h")
    rule = catchup_of(cls, TaskSettings(catchup="all", catchup_max=7))
    assert rule == Catchup("all", 7200.0, 7)
    with pytest.raises(ValueError, match="catchup_window must be a duration"):
        TaskSettings(catchup_window="-1h")
    with pytest.raises(ValueError, match="catchup must be one of"):
        TaskSettings(catchup="every")


@SQLITE
def test_all_passes_over_the_slots_a_backfill_made(make_app):
    from cronjobs.schedule.backfill import backfill

    app, clock = setup(make_app, handler("all", CATCHUP_WINDOW="1h"))
    clock.set(DOWN)
    made = backfill("cu-five", datetime(2026, 3, 2, 12, 5), datetime(2026, 3, 2, 12, 20), app=app)
    assert [b.key for b in made] == [f"2026030212{m:02d}" for m in range(5, 25, 5)]
    started = mine(tick(DOWN, app=app))
    assert sorted(started) == [f"2026030212{m:02d}" for m in range(25, 60, 5)] + ["202603021300"]
    keys = [r["idempotency_key"] for r in scheduled(app)]
    assert len(keys) == 13 and len(set(keys)) == 13
    assert runtime(app)["skipped_count"] == 24
