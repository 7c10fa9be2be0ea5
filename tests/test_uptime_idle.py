"""The built-in `http-uptime` task without URLs is idle (issue 39, rough edges): a tick
starts no slot of it and writes nothing (no `http.uptime.*` row, no slot, no runtime write;
reason `idle`); with `uptime_urls`, or inside `cronjobs serve` (`app.serve_url`), it starts;
the Tasks page, the task's page, `/api/tasks` and `cronjobs tasks` show the note; a manual
run still runs; a handler's `idle` that raises counts as not idle."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from conftest import cli_env
from cronjobs import CronJobHandler
from cronjobs import app as app_module
from cronjobs.cli import main
from cronjobs.clock import FrozenClock
from cronjobs.health.report import run_health
from cronjobs.schedule.manual import run_now
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.taskrows import cli_row, task_rows
from cronjobs.schedule.tasks import task_infos
from cronjobs.store.models import cronjob_queue, cronjob_runtime, cronjob_slot
from dashboard_helpers import BEARER, TOKEN, web_client

T0 = datetime(2026, 1, 5, 12, 0, 5)
NOTE = "no URLs to check: set CRONJOBS_UPTIME_URLS or [[uptime_checks]]"
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def uptime_rows(app) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(cronjob_queue).where(
            cronjob_queue.c.type.like("http.uptime.%"))).mappings()]


def uptime_state(app) -> tuple[dict, list]:
    """The task's runtime row and its slot records."""
    with app.engine.connect() as conn:
        runtime = conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == "http-uptime")).mappings().one()
        slots = conn.execute(sa.select(cronjob_slot.c.slot).where(
            cronjob_slot.c.task == "http-uptime")).all()
    return dict(runtime), list(slots)


def ticks(app, clock, minutes: int) -> list:
    reports = []
    for n in range(minutes):
        clock.set(T0 + timedelta(minutes=n))
        reports.append(tick(app=app))
    return reports


@SQLITE
def test_default_settings_five_minutes_of_ticks_write_nothing_for_the_uptime_task(
        make_app, caplog):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    [info] = [i for i in task_infos(app) if i.task == "http-uptime"]  # its runtime row made
    assert info.idle == NOTE and info.enabled and info.available
    before = uptime_state(app)

    with caplog.at_level(logging.DEBUG, logger="cronjobs"):
        reports = ticks(app, clock, 5)

    assert [r.skipped["http-uptime"] for r in reports] == ["idle"] * 5
    assert all(t != "http-uptime" for r in reports for t, _, _ in r.started)
    assert {t for t, _, _ in reports[0].started} >= {"cronjobs-recoverstale", "test-count"}
    assert uptime_rows(app) == []
    assert uptime_state(app) == before  # no slot, no skip record, no runtime write
    said = [r for r in caplog.records if "http-uptime" in r.getMessage()]
    assert said and {r.levelno for r in said} == {logging.DEBUG}
    # a manual run still runs (and ends cancelled: no target)
    manual = run_now("http-uptime", app=app)
    [row] = uptime_rows(app)
    assert row["id"] == manual.id and row["type"] == "http.uptime.discover"
    # health: an idle task is never overdue
    clock.set(T0 + timedelta(hours=2))
    overdue = [p.key for p in run_health(app).problems if p.key.startswith("overdue:")]
    assert "overdue:http-uptime" not in overdue


@SQLITE
def test_with_uptime_urls_the_task_starts(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, uptime_urls=("http://127.0.0.1:9/",))
    reports = ticks(app, clock, 2)
    assert [s for r in reports for t, s, _ in r.started if t == "http-uptime"] == [
        "202601051200"]  # the second minute: OVERLAP skip, the first run still pending
    assert reports[1].skipped["http-uptime"] == "running"
    assert [r["type"] for r in uptime_rows(app)] == ["http.uptime.discover"]
    assert {r.task: r for r in task_rows(app)}["http-uptime"].idle == ""


@SQLITE
def test_inside_serve_the_task_starts(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    assert app.serve_url is None
    app.serve_url = "http://127.0.0.1:8080"  # what `serve()` sets before its scheduler
    report = tick(app=app)
    assert "http-uptime" in {t for t, _, _ in report.started}
    assert "http-uptime" not in report.skipped


@SQLITE
def test_the_pages_the_api_and_cronjobs_tasks_show_the_note(make_app, db_url):
    app = make_app(clock=FrozenClock(T0), dashboard_token=TOKEN)
    rows = {r.task: r for r in task_rows(app)}
    uptime = rows["http-uptime"]
    assert (uptime.idle, uptime.next_run_at) == (NOTE, None)
    shown = cli_row(uptime)
    assert (shown["next_run_at"], shown["available"]) == ("idle", f"idle: {NOTE}")
    assert rows["test-count"].idle == "" and rows["test-count"].next_run_at is not None

    client = web_client(app)
    listing = client.get("/tasks", headers=BEARER).get_data(as_text=True)
    line = listing.split('data-task="http-uptime"', 1)[1].split("</tr>", 1)[0]
    assert '<span class="badge idle"' in line and f"idle: {NOTE}" in line
    own = client.get("/tasks/http-uptime", headers=BEARER).get_data(as_text=True)
    assert 'id="idle"' in own and NOTE in own and 'id="fires"' not in own
    turkish = client.get("/tasks/http-uptime?lang=tr", headers=BEARER).get_data(as_text=True)
    assert "boşta: denetlenecek URL yok" in turkish
    api = client.get("/api/tasks", headers=BEARER).get_json()
    assert next(r for r in api if r["task"] == "http-uptime")["idle"] == NOTE

    root = logging.getLogger()  # the command sets logging up: put it back for later tests
    handlers, level = root.handlers[:], root.level
    mine = app_module.use(None)  # the command builds its own App from the environment
    try:
        runner = CliRunner()
        env = cli_env(db_url)
        table = runner.invoke(main, ["tasks", "--wide"], env=env, catch_exceptions=False)
        listed = runner.invoke(main, ["tasks", "--json"], env=env, catch_exceptions=False)
        ticked = runner.invoke(main, ["tick", "--now", "2026-01-05T12:00:05Z"], env=env,
                               catch_exceptions=False)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        commands = app_module.use(mine)  # the command's App, installed as the current one
        if commands is not None and commands is not mine:
            commands.close()
    assert table.exit_code == 0 and f"idle: {NOTE}" in table.stdout, table.output
    assert next(r for r in json.loads(listed.stdout) if r["task"] == "http-uptime")["idle"] \
        == NOTE
    assert "skipped http-uptime: idle" in ticked.stdout.splitlines(), ticked.output


class BrokenIdleDiscover(CronJobHandler):
    TYPE = "test.brokenidle.discover"
    FREQUENCY = "minute"

    @classmethod
    def idle(cls, app) -> str | None:
        raise RuntimeError("boom")

    def handle(self, payload, job):
        return True


@SQLITE
def test_an_idle_that_raises_counts_as_not_idle(make_app, caplog):
    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(BrokenIdleDiscover.TYPE, BrokenIdleDiscover)
    with caplog.at_level(logging.WARNING, logger="cronjobs"):
        report = tick(app=app)
    assert "test-brokenidle" in {t for t, _, _ in report.started}
    assert any("BrokenIdleDiscover.idle() raised RuntimeError: boom" in r.getMessage()
               for r in caplog.records)
