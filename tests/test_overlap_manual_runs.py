"""A manual run of a `skip` task whose scheduled run is still going is refused with
"already running (job N)" (API, CLI exit 2, a confirm page in the dashboard) unless
forced, and the force is logged; `cronjobs tasks` shows the overlap columns (and
`--json`)."""

from __future__ import annotations

import json
import logging
from datetime import datetime

import pytest
import sqlalchemy as sa

from conftest import cli_env, run_cli
from cronjobs import CronJobHandler
from cronjobs.clock import FrozenClock
from cronjobs.errors import TaskRunning
from cronjobs.schedule.manual import run_now
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue
from dashboard_helpers import TOKEN, login, web_client

T0 = datetime(2026, 3, 2, 9, 0, 5)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


class SkipDiscover(CronJobHandler):
    TYPE = "test.skip.discover"
    FREQUENCY = "hour"

    def handle(self, payload, job):
        return True


def scheduled_run(make_app, **settings):
    """An App with `test-skip` registered and its 09:00 run started (pending)."""
    app = make_app(clock=FrozenClock(T0), **settings)
    app.handlers.register(SkipDiscover.TYPE, SkipDiscover)
    [job_id] = [j for t, _, j in tick(T0, app=app).started if t == "test-skip"]
    return app, job_id


def set_status(app, job_id: int, status: str) -> None:
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id)
                     .values(status=status))


def test_manual_run_is_refused_while_the_scheduled_run_is_going_unless_forced(make_app,
                                                                              caplog):
    app, job_id = scheduled_run(make_app)
    for status in ("pending", "running"):
        set_status(app, job_id, status)
        with pytest.raises(TaskRunning) as err:
            run_now("test-skip", app=app)
        assert str(err.value) == (f"task 'test-skip' is already running (job {job_id}); its "
                                  f"OVERLAP is 'skip' (use --force to start another)")
        assert err.value.job_id == job_id
    with caplog.at_level(logging.WARNING, logger="cronjobs.schedule.manual"):
        forced = run_now("test-skip", force=True, app=app)
    assert forced.created and forced.id != job_id
    assert [r.getMessage() for r in caplog.records if r.name == "cronjobs.schedule.manual"] == [
        f"task test-skip: manual run forced (job {forced.id}) while its scheduled run is "
        f"still going"]
    set_status(app, job_id, "completed")  # the scheduled run has ended: no refusal
    set_status(app, forced.id, "completed")
    assert run_now("test-skip", app=app).created


@SQLITE
def test_cli_refuses_with_exit_2_and_force_starts_it(db_url, make_app, tmp_path):
    app, job_id = scheduled_run(make_app)
    env = cli_env(db_url)
    env["CRONJOBS_HANDLER_PATHS"] = str(tmp_path)
    (tmp_path / "SkipDiscover.py").write_text(
        "from cronjobs import CronJobHandler\n\n\n"
        "class SkipDiscover(CronJobHandler):\n"
        "    TYPE = 'test.skip.discover'\n    FREQUENCY = 'hour'\n\n"
        "    def handle(self, payload, job):\n        return True\n")
    refused = run_cli(["tasks", "run", "test-skip"], env, cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (f"error: task 'test-skip' is already running (job "
                                      f"{job_id}); its OVERLAP is 'skip' (use --force to start "
                                      f"another)")
    forced = run_cli(["tasks", "run", "test-skip", "--force"], env, cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert int(forced.stdout) > job_id

    with app.engine.begin() as conn:
        conn.execute(sa.text("UPDATE cronjob_runtime SET skipped_count = 4, "
                             "last_skipped_slot = '2026030209', last_skip_reason = 'running' "
                             "WHERE task = 'test-skip'"))
    listing = run_cli(["tasks"], env, cwd=tmp_path)
    header, *lines = listing.stdout.splitlines()
    assert header.split()[-8:] == ["OVERLAP", "SKIPPED", "LAST_SKIPPED", "SKIP_REASON",
                                   "BUFFERED", "LIMITS", "PAUSED", "ZONE"]
    line = next(row for row in lines if row.startswith("test-skip "))
    assert line.split()[-5:] == ["skip", "4", "2026030209", "running", "UTC"]
    as_json = json.loads(run_cli(["tasks", "--json"], env, cwd=tmp_path).stdout)
    mine = next(r for r in as_json if r["task"] == "test-skip")
    assert (mine["overlap"], mine["skipped_count"], mine["last_skipped_slot"],
            mine["last_skip_reason"], mine["buffered_slot"]) \
        == ("skip", 4, "2026030209", "running", None)


@SQLITE
def test_run_now_asks_to_confirm_and_forces_on_the_second_post(make_app):
    app, job_id = scheduled_run(make_app, dashboard_token=TOKEN)
    client = web_client(app)
    csrf = login(client)
    form = {"csrf_token": csrf, "request_token": "tok-running-1", "back": "task"}
    resp = client.post("/tasks/test-skip/run", data=form)
    assert resp.status_code == 409
    html = resp.get_data(as_text=True)
    assert f"Task test-skip is already running (job {job_id})" in html
    assert 'name="force" value="1"' in html and 'value="tok-running-1"' in html
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)
                            .where(cronjob_queue.c.type == SkipDiscover.TYPE)).scalar() == 1
    forced = client.post("/tasks/test-skip/run", data={**form, "force": "1"})
    assert forced.status_code == 303
    assert int(forced.headers["Location"].rsplit("/", 1)[1]) != job_id
    page = client.get("/tasks").get_data(as_text=True)
    assert 'class="opt skipped" title="overlap policy: skip"' in page
