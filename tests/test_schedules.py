"""Many schedules of one handler (`SCHEDULES`) and entries stored at run time
(`cronjobs.schedule.entries`): each entry `<task>:<name>` is a task of its own with its
own slots, payloads, runtime row and history; stored entries start with the next tick,
stop when removed (their history stays) and pause as their task does."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime

import pytest
import sqlalchemy as sa

from conftest import ROOT
from cronjobs import CronJobHandler
from cronjobs.clock import FrozenClock
from cronjobs.errors import HandlerError, HandlerNotFound, InvalidJob, TaskRunning
from cronjobs.schedule import entries
from cronjobs.schedule.manual import run_now
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.tasks import task_infos
from cronjobs.store.models import cronjob_queue, cronjob_runtime, cronjob_slot
from cronjobs.testing import drain

T0 = datetime(2027, 3, 1, 5, 59, 30)  # 08:59:30 in Istanbul (UTC+3)

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


class Report(CronJobHandler):
    """Daily per market, from its SCHEDULES; no FREQUENCY of its own."""

    TYPE = "sx.report.discover"
    SCHEDULES = [
        {"name": "tr", "cron": "0 9 * * *", "timezone": "Europe/Istanbul",
         "payload": {"market": "tr"}},
        {"name": "de", "cron": "0 9 * * *", "timezone": "Europe/Berlin",
         "payload": {"market": "de"}},
    ]

    def handle(self, payload, job):
        return True


def setup(make_app, *classes: type, **settings):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, handler_paths=(), **settings)
    for cls in classes or (Report,):
        app.handlers.register(cls.TYPE, cls)
    return app, clock


def rows(app, task: str) -> list[dict]:
    with app.engine.connect() as conn:
        found = conn.execute(sa.select(cronjob_queue.c.id, cronjob_queue.c.payload,
                                       cronjob_queue.c.title)
                             .where(cronjob_queue.c.title.startswith(f"{task} "))
                             .order_by(cronjob_queue.c.id)).mappings()
        return [{**r, "payload": json.loads(r["payload"])} for r in found]


def mine(report) -> list[tuple[str, str]]:
    """`(task, slot)` of the runs a tick started for this file's tasks (`sx-...`)."""
    return [(t, k) for t, k, _ in report.started if t.startswith("sx-")]


def runtime(app, task: str) -> dict:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == task)).mappings().one())


def test_two_entries_have_their_own_slots_payloads_and_history(make_app):
    app, clock = setup(make_app)
    tasks = {i.task: i for i in task_infos(app)}
    assert {"sx-report", "sx-report:tr", "sx-report:de"} <= set(tasks)
    assert tasks["sx-report:tr"].timezone == "Europe/Istanbul"
    assert tasks["sx-report"].frequency is None  # its own task: manual runs only
    assert mine(tick(T0)) == []  # new cron entries wait a fire
    started = mine(tick(datetime(2027, 3, 1, 6, 0, 5)))  # 09:00 in Istanbul
    assert started == [("sx-report:tr", "202703010900")]
    assert rows(app, "sx-report:tr")[0]["payload"] == {
        "market": "tr", "slot": "202703010900", "schedule": "tr"}
    started = mine(tick(datetime(2027, 3, 1, 8, 0, 5)))  # 09:00 in Berlin (UTC+1)
    assert started == [("sx-report:de", "202703010900")]
    assert rows(app, "sx-report:de")[0]["payload"]["market"] == "de"
    with app.engine.connect() as conn:
        slots = sorted(tuple(r) for r in conn.execute(
            sa.select(cronjob_slot.c.task, cronjob_slot.c.slot)
            .where(cronjob_slot.c.task.startswith("sx-"))))
    assert slots == [("sx-report:de", "202703010900"), ("sx-report:tr", "202703010900")]
    tr, de = runtime(app, "sx-report:tr"), runtime(app, "sx-report:de")
    assert tr["last_job_id"] == rows(app, "sx-report:tr")[0]["id"] != de["last_job_id"]
    assert runtime(app, "sx-report")["last_job_id"] is None
    with pytest.raises(TaskRunning, match="sx-report:tr"):  # OVERLAP: the entry's own run
        run_now("sx-report:tr", app=app)
    run_now("sx-report", app=app)  # the handler's own task is not held by its entries
    manual = run_now("sx-report:tr", force=True, app=app)  # an entry's payload, marked
    with app.engine.connect() as conn:
        payload = conn.execute(sa.select(cronjob_queue.c.payload).where(
            cronjob_queue.c.id == manual.id)).scalar_one()
    assert json.loads(payload) == {"market": "tr", "schedule": "tr", "manual": True}


@pytest.mark.parametrize("schedules, message", [
    ([{"name": "a", "cron": "* * * * *"}, {"name": "a", "cron": "@daily"}],
     "SCHEDULES[1]: schedule name 'a' is used twice"),
    ([{"name": "A b", "cron": "* * * * *"}], "schedule name must be 1 to 64"),
    ([{"name": "x", "cron": "61 * * * *"}], "schedule x: cron:"),
    ([{"name": "x", "cron": "@daily", "timezone": "Mars/Base"}],
     "schedule x: unknown time zone 'Mars/Base'"),
    ([{"name": "x", "cron": "@daily", "payload": [1]}], "payload must be a JSON object"),
    ([{"name": "x", "cron": "@daily", "payload": {"at": object()}}], "not JSON-serialisable"),
    ([{"name": "x", "cron": "@daily", "args": {}}], "unknown key 'args'"),
])
def test_bad_schedules_are_refused_at_registration(make_app, schedules, message):
    app, _ = setup(make_app)
    bad = type("Bad", (Report,), {"TYPE": "sx.bad.discover", "SCHEDULES": schedules})
    with pytest.raises(HandlerError) as err:
        app.handlers.register(bad.TYPE, bad)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_stored_entry_starts_with_the_next_tick_and_stops_when_removed(make_app):
    app, clock = setup(make_app)
    entries.add(app, "sx-report", "us", "*/5 * * * *", timezone="America/New_York",
                payload={"market": "us"}, by="ops@host")
    info = next(i for i in task_infos(app) if i.task == "sx-report:us")
    assert (info.frequency, info.timezone, info.schedule) == (
        "*/5 * * * *", "America/New_York", "us")
    tick(datetime(2027, 3, 1, 6, 1))  # first sight: waits for the next fire
    assert ("sx-report:us", "202703010105") in mine(tick(datetime(2027, 3, 1, 6, 5, 2)))
    assert rows(app, "sx-report:us")[-1]["payload"] == {
        "market": "us", "slot": "202703010105", "schedule": "us"}
    drain(app)  # the run ends: OVERLAP (skip) would hold the entry's next slot otherwise
    entries.pause(app, "sx-report:us", by="ops@host")
    report = tick(datetime(2027, 3, 1, 6, 10, 2))
    assert report.skipped["sx-report:us"] == "paused"
    assert entries.resume(app, "sx-report:us") is True
    assert "sx-report:us" in [t for t, _, _ in tick(datetime(2027, 3, 1, 6, 15, 2)).started]
    entries.remove(app, "sx-report:us")
    report = tick(datetime(2027, 3, 1, 6, 20, 2))
    assert "sx-report:us" not in [t for t, _, _ in report.started]
    assert len(rows(app, "sx-report:us")) == 2  # history stays
    assert runtime(app, "sx-report:us")["last_slot"] == "202703010115"


def test_stored_entries_are_checked_and_nothing_is_written_on_bad_input(make_app):
    app, _ = setup(make_app)
    with pytest.raises(InvalidJob, match="code"):
        entries.add(app, "sx-report", "tr", "@daily")  # a code entry's name
    with pytest.raises(InvalidJob, match="cannot be removed"):
        entries.remove(app, "sx-report:tr")
    with pytest.raises(HandlerNotFound, match="unknown task 'nope'"):
        entries.add(app, "nope", "x", "@daily")
    with pytest.raises(InvalidJob, match="unknown time zone 'Nowhere'"):
        entries.add(app, "sx-report", "x", "@daily", timezone="Nowhere")
    with pytest.raises(InvalidJob, match="TASK:NAME"):
        entries.pause(app, "sx-report", by="me")
    assert [e.source for e in entries.entries(app)] == ["code", "code"]
    entries.add(app, "sx-report", "x", "@daily")
    with pytest.raises(InvalidJob, match="exists already"):
        entries.add(app, "sx-report", "x", "@hourly")
    changed = entries.update(app, "sx-report:x", "@hourly", payload={"k": 1})
    assert (changed.cron, changed.payload) == ("@hourly", {"k": 1})
    assert entries.find(app, "sx-report:x").cron == "@hourly"


def cli(*args: str):
    from click.testing import CliRunner

    from cronjobs.cli import main

    return CliRunner().invoke(main, list(args))


def test_cli_add_list_pause_resume_rm(make_app):
    app, clock = setup(make_app)
    out = cli("schedules", "add", "sx-report", "us", "--cron", "*/5 * * * *",
              "--timezone", "America/New_York", "--payload", '{"market": "us"}')
    assert out.exit_code == 0 and "added sx-report:us" in out.output, out.output
    listed = {r["task"]: r for r in json.loads(cli("schedules", "list", "--json").output)}
    assert listed["sx-report:us"]["source"] == "database"
    assert listed["sx-report:us"]["payload"] == {"market": "us"}
    assert listed["sx-report:tr"]["source"] == "code"
    assert listed["sx-report:tr"]["timezone"] == "Europe/Istanbul"
    assert listed["sx-report:tr"]["next_run_at"] == "2027-03-01T06:00:00Z"
    assert "sx-report:us" in cli("schedules", "list").output
    assert cli("tasks", "disable", "sx-report:us").output.strip() == "sx-report:us: disabled"
    assert runtime(app, "sx-report:us")["enabled"] is False  # its own kill switch
    assert runtime(app, "sx-report:tr")["enabled"] is True
    assert cli("schedules", "pause", "sx-report:us").exit_code == 0
    assert json.loads(cli("schedules", "list", "--json").output)[-1]["paused"] is True
    assert cli("schedules", "resume", "sx-report:us").output.strip() == "resumed sx-report:us"
    assert cli("pause", "--task", "sx-report:tr").exit_code == 0  # the flow pause, the same
    assert next(r for r in entries.listing(app) if r["name"] == "tr")["paused"] is True
    assert "warning" not in cli("resume", "--task", "sx-report:tr").output
    for args, message in [
        (("add", "sx-report", "us", "--cron", "@daily"), "exists already"),
        (("add", "sx-report", "eu", "--cron", "@daily", "--payload", "[1]"),
         "--payload must be a JSON object"),
        (("add", "sx-report", "eu", "--cron", "0 25 * * *"), "schedule eu: cron:"),
        (("add", "nope", "eu", "--cron", "@daily"), "unknown task 'nope'"),
        (("rm", "sx-report:tr"), "cannot be removed"),
        (("pause", "sx-report:zz"), "no schedule 'sx-report:zz'"),
    ]:
        out = cli("schedules", *args)
        assert out.exit_code == 2 and message in out.output, (args, out.output)
        assert len(out.output.strip().splitlines()) == 1, out.output
    assert [e.name for e in entries.entries(app) if e.source == "database"] == ["us"]
    assert cli("schedules", "rm", "sx-report:us").output.strip() == "removed sx-report:us"
    assert [e.source for e in entries.entries(app)] == ["code", "code"]


def test_dashboard_add_shows_the_task_at_once_and_next_tick_starts_it(make_app):
    from dashboard_helpers import TOKEN, login, web_client

    app, clock = setup(make_app, dashboard_token=TOKEN)
    client = web_client(app)
    csrf = login(client)
    page = client.get("/schedules").get_data(as_text=True)
    assert "sx-report:tr" in page and "Europe/Istanbul" in page
    bad = client.post("/schedules/add", data={"csrf_token": csrf, "task": "sx-report",
                                               "name": "us", "cron": "0 9 * * *",
                                               "timezone": "Mars/Base"})
    assert bad.status_code == 400 and "Mars/Base" in bad.get_data(as_text=True)
    assert client.post("/schedules/add", data={"task": "sx-report", "name": "us",
                                               "cron": "@hourly"}).status_code == 403  # CSRF
    assert [e.source for e in entries.entries(app)] == ["code", "code"]  # nothing stored
    done = client.post("/schedules/add", data={
        "csrf_token": csrf, "task": "sx-report", "name": "us", "cron": "*/5 * * * *",
        "payload": '{"market": "us"}'})
    assert done.status_code == 303
    assert entries.find(app, "sx-report:us").created_by.startswith("dashboard@")
    tasks = client.get("/tasks").get_data(as_text=True)
    assert 'data-task="sx-report:us"' in tasks  # before any tick
    assert client.get("/tasks/sx-report:us").status_code == 200
    clock.set(datetime(2027, 3, 1, 6, 0, 30))
    tick()
    assert rows(app, "sx-report:us")[0]["payload"] == {
        "market": "us", "slot": "202703010600", "schedule": "us"}
    page = client.get("/tasks/sx-report:tr").get_data(as_text=True)
    assert "Europe/Istanbul" in page  # an entry's next fire times in its own zone
    page = client.get("/tasks/sx-report:us").get_data(as_text=True)  # its own history
    assert f'/jobs/{rows(app, "sx-report:us")[0]["id"]}"' in page
    assert f'/jobs/{rows(app, "sx-report:tr")[0]["id"]}"' not in page
    paused = client.post("/schedules/sx-report:us/pause", data={"csrf_token": csrf})
    assert paused.status_code == 303
    assert 'data-paused="1"' in client.get("/schedules").get_data(as_text=True)
    client.post("/schedules/sx-report:us/resume", data={"csrf_token": csrf})
    edited = client.post("/schedules/sx-report:us/edit", data={
        "csrf_token": csrf, "cron": "@daily", "timezone": "", "payload": "[1]"})
    assert edited.status_code == 400 and "payload must be a JSON object" in edited.get_data(
        as_text=True)
    client.post("/schedules/sx-report:us/edit", data={"csrf_token": csrf, "cron": "@daily"})
    assert entries.find(app, "sx-report:us").cron == "@daily"
    assert client.post("/schedules/sx-report:tr/remove",
                       data={"csrf_token": csrf}).status_code == 400  # a code entry
    assert client.post("/schedules/sx-report:us/remove",
                       data={"csrf_token": csrf}).status_code == 303
    assert 'data-task="sx-report:us"' not in client.get("/tasks").get_data(as_text=True)


def test_api_list_add_pause_resume_delete_with_the_bearer_token(make_app):
    from dashboard_helpers import BEARER, TOKEN, web_client

    app, _ = setup(make_app, dashboard_token=TOKEN)
    client = web_client(app)
    assert client.get("/api/schedules").status_code == 401
    made = client.post("/api/schedules", headers=BEARER, json={
        "task": "sx-report", "name": "jp", "cron": "0 9 * * *", "timezone": "Asia/Tokyo",
        "payload": {"market": "jp"}})
    assert made.status_code == 201, made.get_json()
    assert made.get_json()["task"] == "sx-report:jp"
    bad = client.post("/api/schedules", headers=BEARER, json={
        "task": "sx-report", "name": "x", "cron": "bad"})
    assert bad.status_code == 400 and "'bad'" in bad.get_json()["error"]
    for name in ("jp", "tr"):  # a stored entry, a code entry: that name is taken
        taken = client.post("/api/schedules", headers=BEARER, json={
            "task": "sx-report", "name": name, "cron": "0 9 * * *"})
        assert taken.status_code == 409 and "sx-report:" + name in taken.get_json()["error"]
    assert client.post("/api/schedules/sx-report:jp/pause", headers=BEARER).status_code == 200
    listed = {r["task"]: r for r in client.get("/api/schedules", headers=BEARER).get_json()}
    assert listed["sx-report:jp"]["paused"] is True and listed["sx-report:jp"]["payload"] == {
        "market": "jp"}
    assert client.post("/api/schedules/sx-report:jp/resume", headers=BEARER).get_json()[
        "paused"] is False
    assert client.delete("/api/schedules/sx-report:tr", headers=BEARER).status_code == 400
    assert client.delete("/api/schedules/sx-report:zz", headers=BEARER).status_code == 404
    assert client.delete("/api/schedules/sx-report:jp", headers=BEARER).status_code == 200
    assert [e.source for e in entries.entries(app)] == ["code", "code"]


def test_the_readme_tour_handler_runs_on_a_schedule_as_written(make_app):
    """The README's hint: the tour's handler with SCHEDULES (no rename) gets its `name`."""
    spec = importlib.util.spec_from_file_location("tour_greet", ROOT / "docs" / "examples"
                                                  / "GreetExecute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tour = type("ScheduledGreet", (module.GreetExecute,), {"SCHEDULES": [
        {"name": "ada", "cron": "*/5 * * * *", "payload": {"name": "Ada"}}]})
    app, clock = setup(make_app, tour)
    tick(T0)
    started = tick(datetime(2027, 3, 1, 6, 0, 3)).started
    assert ("tour-greet:ada", "202703010600") in [(t, k) for t, k, _ in started]
    clock.set(datetime(2027, 3, 1, 6, 0, 4))
    drain(app)
    with app.engine.connect() as conn:
        done = conn.execute(sa.select(cronjob_queue.c.status, cronjob_queue.c.result_payload)
                            .where(cronjob_queue.c.title.startswith("tour-greet:ada "))).one()
    assert done.status == "completed" and "Hello, Ada!" in done.result_payload


def test_deep_huge_and_non_utf8_payloads_are_refused_in_one_line_and_nothing_is_stored(make_app):
    from cronjobs import limits
    from dashboard_helpers import BEARER, TOKEN, web_client

    app, _ = setup(make_app, dashboard_token=TOKEN)
    deep = "[" * 5000 + "]" * 5000
    huge = json.dumps({"a": "x" * (limits.PAYLOAD_MAX_BYTES + 1)})
    for payload, message in [(deep, "nested more than"), ('{"a": ' + deep + "}",
                                                           "nested more than"),
                             (huge, "bytes of JSON; the limit is")]:
        out = cli("schedules", "add", "sx-report", "x", "--cron", "@daily", "--payload", payload)
        assert out.exit_code == 2 and message in out.output, out.output[:300]
        assert len(out.output.strip().splitlines()) == 1
    client = web_client(app)
    for body, code in [('{"task": "sx-report", "name": "x", "cron": "@daily", "payload": {"a": '
                        + deep + "}}", 400),  # the entry's own depth check: one line
                       (json.dumps({"task": "sx-report", "name": "x", "cron": "@daily",
                                    "payload": json.loads(huge)}), 413)]:  # the body's bound
        answer = client.post("/api/schedules", headers={**BEARER, "Content-Type":
                                                        "application/json"}, data=body)
        assert answer.status_code == code, (answer.status_code, answer.get_data()[:200])
        assert "\n" not in answer.get_json()["error"]
    assert [e.source for e in entries.entries(app)] == ["code", "code"]
    # text that is not UTF-8 (a lone surrogate, as a shell's bytes arrive): stored escaped,
    # as a dispatched row's payload is, and the entry's run gets it back as it came
    made = entries.add(app, "sx-report", "raw", "@daily", payload={"a": "\udcff"})
    assert entries.find(app, "sx-report:raw").payload == made.payload == {"a": "\udcff"}
