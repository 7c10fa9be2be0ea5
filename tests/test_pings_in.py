"""Pings in (issue 39 §3): `POST /api/ping/<task>[/start|/fail]` and `cronjobs ping TASK`
record a run of a job that lives elsewhere as a row of its task (history, last run,
last success, the overdue check); a task declared only in the settings is listed, checked
and never scheduled. SQLite, the dashboard's Flask test client and one CLI process."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from conftest import cli_env, run_cli
from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.health.check import Check
from cronjobs.health.checks import overdue
from cronjobs.schedule import pingin
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.taskrows import task_rows
from cronjobs.schedule.tasks import set_enabled, task_infos, unknown_sections
from cronjobs.store.pingruns import PING_QUEUE
from cronjobs.testing import drain
from cronjobs.web import create_app

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

T0 = datetime(2026, 3, 2, 3, 0)
TOKEN = "s3cret-token-for-pings"
NIGHTLY = {"nightly-backup": {"frequency": "0 3 * * *"}}


def runtime(app, task: str) -> dict:
    return next(i.runtime for i in task_infos(app) if i.task == task)


def post(client, path: str, token: str | None = TOKEN, data: bytes = b""):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.post(path, data=data, headers=headers)


@pytest.fixture
def web(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, dashboard_token=TOKEN, tasks=NIGHTLY)
    return app, clock, create_app(app).test_client()


def test_post_ping_moves_last_success_and_needs_the_token(web):
    app, clock, client = web
    assert post(client, "/api/ping/nightly-backup", token=None).status_code == 401
    assert post(client, "/api/ping/nightly-backup", token="wrong").status_code == 401
    assert runtime(app, "nightly-backup")["last_success_at"] is None
    answer = post(client, "/api/ping/nightly-backup")
    assert answer.status_code == 200 and answer.json["status"] == "completed"
    assert runtime(app, "nightly-backup")["last_success_at"] == T0
    clock.set(T0 + timedelta(days=1))
    post(client, "/api/ping/nightly-backup")
    rt = runtime(app, "nightly-backup")
    assert rt["last_success_at"] == T0 + timedelta(days=1)
    assert rt["last_status"] == "completed" and rt["last_job_id"] == answer.json["id"] + 1
    assert post(client, "/api/ping/no-such-task").status_code == 404


def test_start_then_fail_finishes_the_open_row_with_the_text(web):
    app, clock, client = web
    started = post(client, "/api/ping/nightly-backup/start").json
    assert started["status"] == "running"
    clock.set(T0 + timedelta(minutes=7))
    ended = post(client, "/api/ping/nightly-backup/fail", data=b"tar: disk full").json
    assert ended == {"task": "nightly-backup", "id": started["id"], "status": "failed"}
    row = queue.get(started["id"], app=app)
    assert row["queue"] == PING_QUEUE and row["error"] == "tar: disk full"
    assert row["started_at"] == T0 and row["finished_at"] == T0 + timedelta(minutes=7)
    rt = runtime(app, "nightly-backup")
    assert rt["last_status"] == "failed" and rt["last_success_at"] is None


def test_external_task_is_listed_checked_for_overdue_and_never_scheduled(web):
    app, clock, client = web
    info = next(i for i in task_infos(app) if i.task == "nightly-backup")
    assert info.external and info.frequency == "0 3 * * *"
    assert not any("nightly-backup" in line for line in unknown_sections(app))
    [row] = [r for r in task_rows(app) if r.task == "nightly-backup"]
    assert row.source == "external" and row.frequency == "0 3 * * *"
    page = client.get("/tasks", headers={"Authorization": f"Bearer {TOKEN}"})
    assert page.status_code == 200 and "nightly-backup" in page.get_data(as_text=True)
    report = tick(app=app, now=T0)
    assert "nightly-backup" not in {task for task, _, _ in report.started}
    post(client, "/api/ping/nightly-backup")
    clock.set(T0 + timedelta(days=1, hours=1))
    check = Check("overdue")
    overdue(app, check)
    assert "nightly-backup" in check.data["periods_since_success"]
    assert [p for p in check.problems if p.key == "overdue:nightly-backup"] == []
    clock.set(T0 + timedelta(days=6))
    check = Check("overdue")
    overdue(app, check)
    [problem] = [p for p in check.problems if p.key == "overdue:nightly-backup"]
    assert problem.key == "overdue:nightly-backup" and problem.status == "fail"
    set_enabled("nightly-backup", False, app=app)  # its switch: off, not watched
    check = Check("overdue")
    overdue(app, check)
    assert [p for p in check.problems if p.key == "overdue:nightly-backup"] == []


def test_registered_task_ping_is_never_claimed(make_app):
    app = make_app(clock=FrozenClock(T0))
    run = pingin.ping(app, "test-count", "start")
    assert drain(app).reports == []  # a running row, in a queue no handler has
    row = queue.get(run.id, app=app)
    assert row["type"] == "test.count.discover" and row["locked_until"] is None
    assert pingin.ping(app, "test-count").id == run.id
    assert runtime(app, "test-count")["last_success_at"] == T0


def test_cli_ping(make_app, db_url, tmp_path):
    app = make_app(clock=FrozenClock(T0), tasks=NIGHTLY)
    run = pingin.ping(app, "nightly-backup", "start")
    assert run.status == "running"
    config = tmp_path / "cronjobs.toml"
    config.write_text('[tasks.nightly-backup]\nfrequency = "0 3 * * *"\n')
    env = cli_env(db_url, CRONJOBS_CONFIG=str(config))
    done = run_cli(["ping", "nightly-backup", "--message", "42 files"], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"nightly-backup: job {run.id} completed"
    assert runtime(app, "nightly-backup")["last_success_at"] is not None
    unknown = run_cli(["ping", "nightly-bakup"], env)
    assert unknown.returncode == 2 and "unknown task 'nightly-bakup'" in unknown.stderr


def test_a_task_that_runs_here_needs_operate_and_its_open_ping_times_out(web):
    """Security QA (issue 40 fix-sec1): a dispatch token may ping external tasks only; an
    admin's ping start of a task that runs here holds its schedule until recover-stale
    ends it after MAX_RUNTIME plus recover_stale_minutes."""
    from cronjobs.store import tokens

    app, clock, client = web
    with app.engine.begin() as conn:
        dispatch = tokens.create(conn, "ci", "dispatch", T0)
    refused = post(client, "/api/ping/cronjobs-health/start", token=dispatch)
    assert refused.status_code == 403 and refused.get_json() == {"error": (
        "forbidden: POST /api/ping/cronjobs-health/start: task 'cronjobs-health' runs here "
        "(a registered handler); pinging it needs scope operate; token 'ci' has dispatch")}
    assert runtime(app, "cronjobs-health").get("last_job_id") is None  # nothing written
    assert post(client, "/api/ping/nightly-backup/start", token=dispatch).status_code == 200
    started = post(client, "/api/ping/cronjobs-health/start").get_json()  # the admin's
    assert tick(app=app, now=T0).skipped.get("cronjobs-health") == "running"
    grace = 120 + app.settings.recover_stale_minutes * 60  # HealthCheck.MAX_RUNTIME + minutes
    clock.set(T0 + timedelta(seconds=grace))
    assert queue.recover_stale(app=app) == 0  # not past it yet
    clock.set(T0 + timedelta(seconds=grace + 1))
    assert queue.recover_stale(app=app) == 1  # the health ping; the external one stays open
    ended = queue.get(started["id"], app=app)
    assert ended["status"] == "failed" and ended["error"].startswith("ping start not ended")
    assert runtime(app, "cronjobs-health")["last_status"] == "failed"
    assert pingin.ping(app, "nightly-backup").status == "completed"  # its start was open
    report = tick(app=app, now=T0 + timedelta(hours=1))  # its next slot starts
    assert "cronjobs-health" in {task for task, _, _ in report.started}, report.skipped
