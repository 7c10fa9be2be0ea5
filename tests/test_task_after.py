"""`AFTER = "task"`: a task's slot starts only once the other task's run of the same slot
(its whole family) has ended; one row per slot with 3 schedulers; an AFTER naming no task
or making a cycle is refused. On SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock
from cronjobs.errors import ConfigError
from cronjobs.family import depends
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.taskrows import cli_row, task_rows
from cronjobs.schedule.tasks import after_of, set_enabled
from cronjobs.store.models import cronjob_queue
from cronjobs.testing import drain

T0 = datetime(2026, 3, 2, 9, 0, 5)


class First(CronJobHandler):
    """Every minute: a discover with two children."""

    TYPE = "aft.first.discover"
    FREQUENCY = "minute"
    QUEUE = "aft1"

    def handle(self, payload, job):
        for n in range(2):
            self.dispatch("aft.child.execute", {"n": n})
        return True


class Child(CronJobHandler):
    TYPE = "aft.child.execute"
    QUEUE = "aftc"

    def handle(self, payload, job):
        return True


class Second(CronJobHandler):
    """Every minute, after `aft-first`'s run of the same slot."""

    TYPE = "aft.second.discover"
    FREQUENCY = "minute"
    QUEUE = "aft2"
    AFTER = "aft-first"

    def handle(self, payload, job):
        return True


def apps(make_app, n: int, *handlers):
    clock = FrozenClock(T0)
    made = []
    for _ in range(n):
        app = make_app(clock=clock, handler_paths=())
        for cls in handlers:
            app.handlers.register(cls.TYPE, cls)
        made.append(app)
    return made, clock


def rows(app, job_type: str) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(cronjob_queue).where(
            cronjob_queue.c.type == job_type).order_by(cronjob_queue.c.id)).mappings()]


def tick_all(schedulers, now) -> list:
    """A tick of the same instant by every scheduler, at once (threads)."""
    reports, gate = [None] * len(schedulers), threading.Barrier(len(schedulers))

    def one(n: int) -> None:
        gate.wait(5)
        reports[n] = tick(now, app=schedulers[n])

    threads = [threading.Thread(target=one, args=(n,)) for n in range(len(schedulers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return reports


def test_the_second_task_starts_after_the_first_tasks_family_on_3_schedulers(make_app):
    schedulers, clock = apps(make_app, 3, First, Child, Second)
    app = schedulers[0]
    tick_all(schedulers, T0)
    [first], [second] = rows(app, "aft.first.discover"), rows(app, "aft.second.discover")
    assert (first["status"], second["status"]) == ("pending", "waiting")
    with app.engine.connect() as conn:
        assert depends.waiting_for(conn, [second["id"]]) == {second["id"]: [first["id"]]}
    shown = {r.task: cli_row(r) for r in task_rows(app)}
    assert shown["aft-second"]["last_status"] == "waiting for aft-first"
    assert shown["aft-second"]["after"] == "aft-first"

    drain(app, ["aft1", "aft2"])  # the first's discover ends; its children wait
    assert rows(app, "aft.second.discover")[0]["status"] == "waiting"
    drain(app, ["aftc"])  # the children end: the family completes and releases the second
    assert rows(app, "aft.second.discover")[0]["status"] == "pending"
    drain(app, ["aft2"])
    second = rows(app, "aft.second.discover")[0]
    assert second["status"] == "completed"
    last_child = max(r["finished_at"] for r in rows(app, "aft.child.execute"))
    assert second["started_at"] >= last_child

    clock.set(T0 + timedelta(seconds=30))
    tick_all(schedulers, clock.now())  # the same slot again: nothing new
    assert len(rows(app, "aft.first.discover")) == len(rows(app, "aft.second.discover")) == 1


def test_the_second_task_waits_while_the_first_has_no_row_for_the_slot(make_app):
    [app], clock = apps(make_app, 1, First, Child, Second)
    set_enabled("aft-first", False, app=app)
    report = tick(T0, app=app)
    assert (report.skipped["aft-first"], report.skipped["aft-second"]) == ("disabled", "after")
    assert rows(app, "aft.second.discover") == []
    set_enabled("aft-first", True, app=app)
    report = tick(T0 + timedelta(seconds=20), app=app)  # the same slot, a later tick
    assert sorted(t for t, _, _ in report.started) == ["aft-first", "aft-second"]
    [second] = rows(app, "aft.second.discover")
    assert second["status"] == "waiting"


def test_a_failed_first_run_still_lets_the_second_start(make_app):
    [app], clock = apps(make_app, 1, First, Child, Second)
    tick(T0, app=app)
    [first] = rows(app, "aft.first.discover")
    from cronjobs.actions import operator
    operator.cancel(app, first["id"], who="test")  # ended (cancelled, no children)
    assert rows(app, "aft.second.discover")[0]["status"] == "pending"


class Unknown(Second):
    TYPE = "aft.typo.discover"
    AFTER = "aft-frist"


class CycleA(CronJobHandler):
    TYPE = "aft.cyclea.discover"
    FREQUENCY = "minute"
    AFTER = "aft-cycleb"

    def handle(self, payload, job):
        return True


class CycleB(CycleA):
    TYPE = "aft.cycleb.discover"
    AFTER = "aft-cyclea"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_unknown_or_cyclic_after_is_refused(make_app):
    [app], _ = apps(make_app, 1, First, Child, Unknown)
    with pytest.raises(ConfigError, match=r"^aft-typo: AFTER = 'aft-frist' names no registered "
                                          r"task \(did you mean aft-first\?\)$"):
        after_of(app)
    with pytest.raises(ConfigError):
        tick(T0, app=app)
    [app], _ = apps(make_app, 1, CycleA, CycleB)
    with pytest.raises(ConfigError, match="AFTER makes a cycle: aft-cyclea -> aft-cycleb -> "
                                          "aft-cyclea"):
        after_of(app)
    [app], _ = apps(make_app, 1, First, Child, Second)
    assert after_of(app) == {"aft-second": "aft-first"}
    assert queue.dispatch("aft.second.discover", {}, app=app)  # dispatch is not held by AFTER
