"""A task's pause with an end (`pause --task NAME --for ...`) is judged on the database's
clock, as queue and type pauses are: a scheduler whose host clock is 20 minutes ahead
still skips the paused task's slot while the pause lasts by the database's clock; on
SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from cronjobs import store
from cronjobs.clock import SystemClock, utcnow
from cronjobs.schedule.scheduler import tick
from test_overlap_policy import AllowDiscover, ChildExecute, GrandchildExecute, started

AHEAD = timedelta(minutes=20)


class AheadClock(SystemClock):
    """The system clock of a host 20 minutes ahead of the database's."""

    def now(self):
        return utcnow() + AHEAD


def test_a_task_pause_is_judged_on_the_database_clock(make_app):
    clock = AheadClock()
    app = make_app(clock=clock, handler_paths=())
    for cls in (AllowDiscover, ChildExecute, GrandchildExecute):
        app.handlers.register(cls.TYPE, cls)
    with app.engine.begin() as conn:
        now = store.flow.flow_now(conn, clock)  # the database's now
        assert abs(now - utcnow()) < timedelta(minutes=1)
        store.pause(conn, "task", "ov-allow", now=now, until=now + timedelta(minutes=10),
                    reason="incident", by="test")
    report = tick(clock.now())  # the host's now: 10 minutes past the pause's end
    assert started(report, "ov-allow") == []
    assert report.skipped["ov-allow"] == "paused"

    with app.engine.begin() as conn:
        assert store.resume(conn, "task", "ov-allow")
    assert started(tick(clock.now() + timedelta(minutes=1)), "ov-allow") != []
