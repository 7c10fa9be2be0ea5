"""A scheduled task's slot starts nothing while its previous run's family is still going
(`OVERLAP = "skip"`, recorded once per slot), `buffer_one` starts exactly one run after
the family ends, `allow` starts every slot; on SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock
from cronjobs.errors import HandlerError
from cronjobs.schedule.overlap import Decision, decide
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue, cronjob_runtime
from cronjobs.testing import drain

T0 = datetime(2026, 3, 2, 9, 0, 5)
CHILDREN = 3


class FamilyDiscover(CronJobHandler):
    """Every minute; dispatches CHILDREN executes to queue `ovx` (one of which dispatches a
    grandchild to `ovg`)."""

    TYPE = "ov.family.discover"
    FREQUENCY = "minute"
    QUEUE = "ovd"

    def handle(self, payload, job):
        for n in range(CHILDREN):
            self.dispatch("ov.child.execute", {"n": n})
        return True


class ChildExecute(CronJobHandler):
    TYPE = "ov.child.execute"
    QUEUE = "ovx"

    def handle(self, payload, job):
        if payload.get("n") == 0:
            self.dispatch("ov.grandchild.execute", {})
        return True


class GrandchildExecute(CronJobHandler):
    TYPE = "ov.grandchild.execute"
    QUEUE = "ovg"

    def handle(self, payload, job):
        return True


class BufferDiscover(FamilyDiscover):
    TYPE = "ov.buffer.discover"
    OVERLAP = "buffer_one"


class AllowDiscover(FamilyDiscover):
    TYPE = "ov.allow.discover"
    OVERLAP = "allow"


HANDLERS = (FamilyDiscover, ChildExecute, GrandchildExecute, BufferDiscover, AllowDiscover)


def setup(make_app, *only: type):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, handler_paths=())
    for cls in only + (ChildExecute, GrandchildExecute):
        app.handlers.register(cls.TYPE, cls)
    return app, clock


def at(clock, minutes: float):
    now = T0 + timedelta(minutes=minutes)
    clock.set(now)
    return tick(now)


def runtime(app, task: str) -> dict:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(cronjob_runtime)
                                 .where(cronjob_runtime.c.task == task)).mappings().one())


def rows(app, job_type: str) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(cronjob_queue).where(cronjob_queue.c.type == job_type)
            .order_by(cronjob_queue.c.id)).mappings()]


def started(report, task: str) -> list[str]:
    return [slot for t, slot, _ in report.started if t == task]


def test_skip_holds_every_slot_while_the_discover_family_is_going(make_app, caplog):
    app, clock = setup(make_app, FamilyDiscover)
    first = at(clock, 0)
    assert started(first, "ov-family") == ["202603020900"]
    drain(app, ["ovd"])  # the discover completes; its 3 children wait in `ovx`
    [root] = rows(app, "ov.family.discover")
    assert root["status"] == "completed"
    children = rows(app, "ov.child.execute")
    assert [c["root_id"] for c in children] == [root["id"]] * CHILDREN

    with caplog.at_level(logging.INFO, logger="cronjobs.schedule.scheduler"):
        second = at(clock, 1)
        again = at(clock, 1.5)  # a later tick of the same slot: not counted twice
    assert started(second, "ov-family") == [] and second.skipped["ov-family"] == "running"
    assert again.skipped["ov-family"] == "skipped"
    state = runtime(app, "ov-family")
    assert (state["skipped_count"], state["last_skipped_slot"], state["last_skip_reason"]) \
        == (1, "202603020901", "running")
    assert state["last_skipped_at"] == T0 + timedelta(minutes=1)
    skips = [r.getMessage() for r in caplog.records if "ov-family slot" in r.getMessage()
             and "skipped (running)" in r.getMessage()]
    assert len(skips) == 1 and f"job {root['id']}" in skips[0], skips

    drain(app, ["ovx"])  # children done; the grandchild still pending: the family goes on
    [grandchild] = rows(app, "ov.grandchild.execute")
    assert grandchild["root_id"] == root["id"] and grandchild["status"] == "pending"
    assert started(at(clock, 2), "ov-family") == []
    assert runtime(app, "ov-family")["skipped_count"] == 2

    drain(app, ["ovg"])  # the whole family has ended: the next slot runs
    assert started(at(clock, 2.5), "ov-family") == []  # slot 09:02 was skipped: stays so
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cronjobs.schedule.scheduler"):
        assert started(at(clock, 3), "ov-family") == ["202603020903"]
    assert len(rows(app, "ov.family.discover")) == 2
    assert runtime(app, "ov-family")["skipped_count"] == 2
    # the skipped slots were logged as skipped, not again as missed
    assert not [r for r in caplog.records if "missed slot" in r.getMessage()], caplog.text


def test_buffer_one_starts_exactly_one_run_once_the_family_ends(make_app):
    app, clock = setup(make_app, BufferDiscover)
    at(clock, 0)
    drain(app, ["ovd"])
    report = at(clock, 1)
    assert report.skipped["ov-buffer"] == "buffered"  # slot 09:01 waits
    assert report.buffered == {"ov-buffer"}  # the one that waits, not one dropped
    assert runtime(app, "ov-buffer")["buffered_slot"] == "202603020901"
    assert runtime(app, "ov-buffer")["skipped_count"] == 0
    for minute in (2, 3):  # a second waiting slot is skipped: at most one waits
        report = at(clock, minute)
        assert started(report, "ov-buffer") == [] and report.skipped["ov-buffer"] == "buffered"
        assert report.buffered == set()
    state = runtime(app, "ov-buffer")
    assert (state["skipped_count"], state["last_skipped_slot"], state["last_skip_reason"],
            state["buffered_slot"]) == (2, "202603020903", "buffered", "202603020901")
    assert len(rows(app, "ov.buffer.discover")) == 1  # never on top of the running one

    drain(app, ["ovx", "ovg"])
    assert started(at(clock, 3.5), "ov-buffer") == ["202603020903"]  # the buffered run
    assert runtime(app, "ov-buffer")["buffered_slot"] is None
    assert started(at(clock, 3.8), "ov-buffer") == []
    assert len(rows(app, "ov.buffer.discover")) == 2


def test_allow_starts_every_slot_on_top_of_the_running_family(make_app):
    app, clock = setup(make_app, AllowDiscover)
    at(clock, 0)
    drain(app, ["ovd"])
    assert started(at(clock, 1), "ov-allow") == ["202603020901"]
    assert started(at(clock, 2), "ov-allow") == ["202603020902"]
    assert runtime(app, "ov-allow")["skipped_count"] == 0


def test_a_killed_run_holds_the_task_until_recover_stale_ends_it(make_app):
    app, clock = setup(make_app, FamilyDiscover)
    [job_id] = [j for t, _, j in at(clock, 0).started if t == "ov-family"]
    lease_end = T0 + timedelta(seconds=30)
    with app.engine.begin() as conn:  # what a worker killed mid-run leaves behind
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id).values(
            status="running", attempts=1, max_attempts=2, worker_id="gone:1", started_at=T0,
            locked_until=lease_end))
    assert at(clock, 1).skipped["ov-family"] == "running"
    assert queue.recover_stale(0, app=app) == 1  # the lease ran out: pending again
    assert queue.get(job_id, app=app)["status"] == "pending"
    assert at(clock, 2).skipped["ov-family"] == "running"  # it will be redone: still going
    with app.engine.begin() as conn:  # killed again, its last attempt
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id).values(
            status="running", attempts=2, worker_id="gone:2", locked_until=lease_end))
    assert queue.recover_stale(0, app=app) == 1
    assert queue.get(job_id, app=app)["status"] == "failed"
    assert started(at(clock, 3), "ov-family") == ["202603020903"]


def test_recover_stale_runs_while_its_own_last_run_was_killed(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, handler_paths=())
    [job_id] = [j for t, _, j in tick(T0).started if t == "cronjobs-recoverstale"]
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id).values(
            status="running", attempts=1, worker_id="gone:1", locked_until=T0))
    clock.set(T0 + timedelta(minutes=1))
    report = tick(T0 + timedelta(minutes=1))
    assert [t for t, _, _ in report.started if t == "cronjobs-recoverstale"] \
        == ["cronjobs-recoverstale"]


def test_a_bad_overlap_is_refused_when_the_handler_loads(make_app):
    app = make_app(handler_paths=())

    class Bad(FamilyDiscover):
        TYPE = "ov.bad.discover"
        OVERLAP = "queue"

    with pytest.raises(HandlerError) as err:
        app.handlers.register(Bad.TYPE, Bad)
    assert "OVERLAP must be one of 'skip', 'buffer_one', 'allow', got 'queue'" in str(err.value)


@pytest.mark.parametrize("policy, runtime_row, live, expected", [
    ("skip", {}, None, Decision("start")),
    ("skip", {}, 7, Decision("skip", "running")),
    ("skip", {"last_skipped_slot": "s1"}, None, Decision("none", "skipped")),
    ("allow", {}, 7, Decision("start")),
    ("allow", {"last_skipped_slot": "s1"}, None, Decision("none", "skipped")),  # e.g. paused
    ("buffer_one", {}, 7, Decision("buffer", "buffered")),
    ("buffer_one", {"buffered_slot": "s1"}, 7, Decision("wait", "buffered")),
    ("buffer_one", {"buffered_slot": "s0"}, 7, Decision("skip", "buffered")),
    ("buffer_one", {"buffered_slot": "s0", "last_skipped_slot": "s1"}, None, Decision("start")),
    ("buffer_one", {"buffered_slot": "s0", "last_skipped_slot": "s1"}, 7,
     Decision("skip", "buffered")),
])
def test_decide(policy, runtime_row, live, expected):
    assert decide(policy, runtime_row, "s1", live) == expected


def test_cli_tick_tells_the_buffered_slot_from_a_dropped_one(make_app):
    """`cronjobs tick`: the slot that waits as the buffered run is "buffered"; a later one,
    dropped because a slot waits already, is "skipped"."""
    from click.testing import CliRunner

    from cronjobs.cli import main

    app, clock = setup(make_app, BufferDiscover)
    at(clock, 0)
    drain(app, ["ovd"])
    out = []
    for minute in (1, 2):
        clock.set(T0 + timedelta(minutes=minute))
        result = CliRunner().invoke(main, ["tick", "--now", f"{clock.now():%Y-%m-%dT%H:%M}"])
        assert result.exit_code == 0, result.output
        out.append([line for line in result.output.splitlines()  # not the log's lines
                    if line.startswith(("buffered ov-buffer", "skipped ov-buffer"))])
    assert out == [["buffered ov-buffer: its slot starts when the previous run is done"],
                   ["skipped ov-buffer: buffered (a buffered slot waits already)"]]
