"""A dead-man's switch per task (issue 39): `AUTO_PAUSE_AFTER_FAILURES` pauses a task after
N failed scheduled runs in a row and alerts once; `EXPECT`'s `success_within` makes
`overdue:<task>` fail past it (one alert, one recovery); its `duration` range reports
`too_fast` / `too_slow`; bad values are refused in one line."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from alert_helpers import Inbox
from conftest import cli_env, run_cli
from cronjobs import CronJobHandler, store
from cronjobs.clock import FrozenClock
from cronjobs.config import Settings
from cronjobs.errors import CronjobsError, HandlerError
from cronjobs.health import alerts, run_health
from cronjobs.schedule.manual import run_now
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue, cronjob_runtime
from cronjobs.testing import drain
from dashboard_helpers import TOKEN, login, web_client
from registry import check_class

T0 = datetime(2026, 3, 2, 0, 0, 5)
STATE = {"fail": True, "seconds": 0.0}


class Flaky(CronJobHandler):
    TYPE = "expect.flaky.execute"
    FREQUENCY = "minute"
    ISOLATION = "thread"
    MAX_ATTEMPTS = 1
    AUTO_PAUSE_AFTER_FAILURES = 3

    def handle(self, payload, job):
        if STATE["fail"]:
            raise RuntimeError("backup target unreachable")
        return True


class Backup(CronJobHandler):
    TYPE = "expect.backup.execute"
    FREQUENCY = "day"
    ISOLATION = "thread"
    EXPECT = {"success_within": "26h", "duration": ("30s", "20m")}

    def handle(self, payload, job):
        self.context.app.clock.advance(STATE["seconds"])  # the run's duration, frozen
        return True


class Sweep(CronJobHandler):
    TYPE = "expect.sweep.discover"
    FREQUENCY = "hour"
    ISOLATION = "thread"
    AUTO_PAUSE_AFTER_FAILURES = 1

    def handle(self, payload, job):
        self.dispatch("expect.sweep.execute", {})
        return True  # the row completes; its family fails


class SweepItem(CronJobHandler):
    TYPE = "expect.sweep.execute"
    ISOLATION = "thread"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        raise RuntimeError("item failed")


@pytest.fixture
def inbox():
    box = Inbox()
    yield box
    box.close()


def app_with(make_app, inbox, cls, **settings):
    STATE.update(fail=True, seconds=0.0)
    app = make_app(clock=FrozenClock(T0), handler_paths=(),
                   alert_webhook_url=inbox.url + "/hook", **settings)
    app.handlers.register(cls.TYPE, cls)
    return app


def runtime(app, task: str) -> dict:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == task)).mappings().one())


def problems(app, prefix: str) -> dict:
    return {p.key: (p.status, p.message) for p in run_health(app).problems
            if p.key.startswith(prefix)}


def alert_lines(inbox, key: str) -> list[tuple[str, str]]:
    """`(kind, line)` of every entry about problem `key` the webhook received."""
    return [(e["kind"], e["line"]) for hook in inbox.hooks()
            for e in hook["problems"] + hook["recovered"] if e["key"] == key]


def health_and_alerts(app, times: int = 2) -> None:
    for _ in range(times):
        alerts.process(app, run_health(app))
        app.clock.advance(30)


def scheduled_run(app, task: str) -> int:
    [job] = [j for t, _, j in tick(app=app).started if t == task]
    drain(app)
    return job


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_third_failure_in_a_row_pauses_alerts_once_and_resume_clears(make_app, inbox, db_url,
                                                                      namespace):
    app, task = app_with(make_app, inbox, Flaky), "expect-flaky"
    for n in (1, 2):
        scheduled_run(app, task)
        assert runtime(app, task)["failure_streak"] == n
        app.clock.advance(60)
    STATE["fail"] = False  # a success ends the streak
    scheduled_run(app, task)
    assert runtime(app, task)["failure_streak"] == 0
    STATE["fail"] = True
    for _ in range(3):
        app.clock.advance(60)
        scheduled_run(app, task)
    assert runtime(app, task)["failure_streak"] == 3
    with app.engine.connect() as conn:
        [pause] = [p for p in store.list_pauses(conn, app.clock.now()) if p["name"] == task]
    assert (pause["scope"], pause["reason"], pause["created_by"]) == \
        ("task", "auto: 3 failures in a row", "cronjobs")
    assert problems(app, "failing:") == {
        f"failing:{task}": ("fail", f"task {task} failed 3 times in a row; paused")}
    health_and_alerts(app, 3)
    sent = alert_lines(inbox, f"failing:{task}")
    assert [k for k, _ in sent] == ["problem"], sent
    assert sent[0][1].startswith(f"FAIL: task {task} failed 3 times in a row; paused")

    app.clock.advance(60)  # the next slots are skipped, paused
    assert [t for t, _, _ in tick(app=app).started if t == task] == []
    assert runtime(app, task)["last_skip_reason"] == "paused"
    STATE["fail"] = False
    manual = run_now(task, app=app)  # a manual run still runs while paused
    drain(app)
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(cronjob_queue.c.status).where(
            cronjob_queue.c.id == manual.id)).scalar() == "completed"
    assert runtime(app, task)["failure_streak"] == 3  # a manual run is not the schedule's

    out = run_cli(["resume", "--task", task], cli_env(db_url, namespace))
    assert out.returncode == 0 and out.stdout.strip() == f"resumed task {task}", out.stderr
    assert runtime(app, task)["failure_streak"] == 0
    with app.engine.connect() as conn:
        assert not store.is_task_paused(conn, task, app.clock.now())
    health_and_alerts(app, 2)
    assert [k for k, _ in alert_lines(inbox, f"failing:{task}")] == ["problem", "recovered"]
    app.clock.advance(60)
    scheduled_run(app, task)
    assert runtime(app, task)["last_status"] == "completed"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_success_within_fails_overdue_once_and_recovers_after_the_next_success(make_app,
                                                                                inbox):
    app, task = app_with(make_app, inbox, Backup), "expect-backup"
    STATE["seconds"] = 60
    scheduled_run(app, task)
    done = runtime(app, task)["last_success_at"]
    app.clock.set(done + timedelta(hours=26))
    assert f"overdue:{task}" not in problems(app, "overdue:")
    app.clock.set(done + timedelta(hours=26, minutes=1))
    assert problems(app, "overdue:")[f"overdue:{task}"] == \
        ("fail", f"task {task} has not succeeded in 26 h")
    health_and_alerts(app, 4)
    sent = alert_lines(inbox, f"overdue:{task}")
    assert [k for k, _ in sent] == ["problem"], sent
    assert sent[0][1].startswith(f"FAIL: task {task} has not succeeded in 26 h")
    scheduled_run(app, task)  # the next day's slot succeeds
    assert f"overdue:{task}" not in problems(app, "overdue:")
    health_and_alerts(app, 3)
    assert [k for k, _ in alert_lines(inbox, f"overdue:{task}")] == ["problem", "recovered"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_run_outside_the_duration_range_is_too_fast_or_too_slow_until_one_is_inside(
        make_app, inbox):
    app, task = app_with(make_app, inbox, Backup), "expect-backup"
    STATE["seconds"] = 2
    scheduled_run(app, task)
    assert problems(app, "too_") == {
        f"too_fast:{task}": ("warn", f"task {task} ran 2 s, expected at least 30 s")}
    STATE["seconds"] = 25 * 60
    app.clock.advance(86400)
    scheduled_run(app, task)
    assert problems(app, "too_") == {
        f"too_slow:{task}": ("warn", f"task {task} ran 25 min, expected at most 20 min")}
    STATE["seconds"] = 60
    app.clock.advance(86400)
    scheduled_run(app, task)
    assert problems(app, "too_") == {}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_dashboards_resume_clears_the_auto_pause_and_the_streak(make_app, inbox):
    app, task = app_with(make_app, inbox, Flaky, dashboard_token=TOKEN,
                         tasks={"expect-flaky": {"auto_pause_after_failures": 2}}), "expect-flaky"
    for _ in range(2):
        scheduled_run(app, task)
        app.clock.advance(60)
    with app.engine.connect() as conn:
        [pause] = [p for p in store.list_pauses(conn, app.clock.now()) if p["name"] == task]
    assert pause["reason"] == "auto: 2 failures in a row"  # the settings win over the class
    client = web_client(app)
    done = client.post("/flow/resume", data={"csrf_token": login(client), "scope": "task",
                                             "name": task})
    assert done.status_code == 303
    assert runtime(app, task)["failure_streak"] == 0
    with app.engine.connect() as conn:
        assert not store.is_task_paused(conn, task, app.clock.now())


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)
def test_a_discovers_run_fails_when_its_family_does(make_app, inbox):
    app, task = app_with(make_app, inbox, Sweep), "expect-sweep"
    app.handlers.register(SweepItem.TYPE, SweepItem)
    scheduled_run(app, task)
    state = runtime(app, task)
    assert (state["last_status"], state["failure_streak"]) == ("failed", 1)
    with app.engine.connect() as conn:
        assert store.is_task_paused(conn, task, app.clock.now())


class Bad(Flaky):
    TYPE = "expect.bad.execute"


@pytest.mark.parametrize(("constant", "value", "says"), [
    ("AUTO_PAUSE_AFTER_FAILURES", 0, "AUTO_PAUSE_AFTER_FAILURES must be an integer >= 1"),
    ("AUTO_PAUSE_AFTER_FAILURES", True, "got True"),
    ("EXPECT", {"succes_within": "26h"}, "EXPECT: unknown key 'succes_within'"),
    ("EXPECT", {"success_within": "soon"}, "EXPECT success_within must be a duration"),
    ("EXPECT", {"duration": ("20m", "30s")}, "min '20m' must be less than max '30s'"),
    ("EXPECT", {"duration": "30s"}, "EXPECT duration must be a (min, max) pair"),
])
def test_bad_expectations_are_refused_at_registration_in_one_line(constant, value, says):
    setattr(Bad, constant, value)
    try:
        with pytest.raises(HandlerError) as err:
            check_class(Bad.TYPE, Bad)
    finally:
        delattr(Bad, constant)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("test_task_expectations.Bad")


@pytest.mark.parametrize(("table", "says"), [
    ({"auto_pause_after_failures": 0}, "auto_pause_after_failures must be an integer >= 1"),
    ({"expect": {"success_within": "-1h"}}, "expect success_within must be a duration"),
    ({"expect": {"lasts": "1h"}}, "expect: unknown key 'lasts'"),
])
def test_bad_expectations_in_the_settings_name_the_key(table, says):
    with pytest.raises((CronjobsError, ValueError)) as err:
        Settings(database_url="sqlite://", tasks={"db-backup": table})
    assert says in str(err.value)


def test_settings_expectations_override_the_handler():
    from cronjobs.schedule.expect import auto_pause_of, expect_of

    cfg = Settings(database_url="sqlite://", tasks={"expect-backup": {
        "expect": {"duration": ["1m", "2m"]}, "auto_pause_after_failures": 5}}
    ).task("expect-backup")
    assert expect_of(Backup, cfg).min_seconds == 60 and expect_of(Backup, cfg).success_within \
        is None
    assert auto_pause_of(Flaky, cfg) == 5 and auto_pause_of(Flaky, None) == 3
