"""The Workers page as a busy view: running jobs with worker, slot and elapsed time, each
worker's busy / total slots, how old its numbers are, in Turkish too; its JSON route for
live updates; Stop through a confirmation and a POST with the CSRF token, refused (409,
nothing written) for a row that does not run and (403) without the token."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from cronjobs.clock import FrozenClock
from cronjobs.store.models import cronjob_stop, cronjob_worker
from cronjobs.worker import heartbeat
from dashboard_helpers import BEARER, TOKEN, add_row, csrf_of, db_now, login, recent_t0, web_client

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def busy(make_app):
    """A worker of 4 slots running two rows (slots 1 and 3), a finished row, a client."""
    t0 = recent_t0()
    app = make_app(clock=FrozenClock(t0), dashboard_token=TOKEN)
    first = add_row(app, status="running", attempts=1, worker_id="host-a:11", title="export",
                    started_at=t0 - timedelta(seconds=75))
    second = add_row(app, status="running", attempts=2, worker_id="host-a:11",
                     started_at=t0 - timedelta(seconds=5))
    done = add_row(app, status="completed", attempts=1, finished_at=t0)
    seen = db_now(app)
    with app.engine.begin() as conn:
        conn.execute(cronjob_worker.insert().values(
            id="host-a:11", host="host-a", pid=11, queues="default", status="running",
            started_at=seen, last_seen_at=seen - timedelta(seconds=3), jobs_done=9,
            current_jobs=f"{first},{second}", slots=4,
            job_slots=heartbeat.format_job_slots({first: 1, second: 3})))
    return app, web_client(app), (first, second, done)


def _requests(app) -> list[tuple]:
    with app.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(cronjob_stop.c.job_id,
                                                         cronjob_stop.c.attempt,
                                                         cronjob_stop.c.requested_by))]


@SQLITE
def test_the_page_shows_running_jobs_slots_elapsed_time_and_busy_slots(busy):
    app, client, (first, second, done) = busy
    login(client)
    html = client.get("/workers").get_data(as_text=True)
    assert f'<tr data-id="{first}">' in html and f'<tr data-id="{second}">' in html
    assert f'<tr data-id="{done}">' not in html
    assert '<td class="slot">1</td>' in html and '<td class="slot">3</td>' in html
    assert '<td class="elapsed">1 min 15 sec</td>' in html
    assert '<td class="busy">2 of 4</td>' in html
    assert "Numbers as of" in html and 'data-live-url="/api/workers"' in html
    assert f'href="/jobs/{first}/stop" class="stop"' in html
    turkish = client.get("/workers?lang=tr").get_data(as_text=True)
    assert "Şu an çalışanlar" in turkish and "2 / 4" in turkish and "Durdur" in turkish


@SQLITE
def test_the_json_route_answers_the_numbers_and_the_live_part(busy):
    app, client, (first, second, _) = busy
    data = client.get("/api/workers", headers=BEARER).get_json()
    assert [(r["id"], r["slot"], r["worker_id"]) for r in data["running"]] == [
        (first, 1, "host-a:11"), (second, 3, "host-a:11")]
    assert [(w["id"], w["busy"], w["slots"]) for w in data["workers"]] == [("host-a:11", 2, 4)]
    assert 'id="running"' in data["html"] and "<html" not in data["html"]
    assert client.get("/api/workers").status_code == 401


@SQLITE
def test_stop_asks_to_confirm_then_records_a_request_for_the_running_attempt(busy):
    app, client, (_, second, _) = busy
    csrf = login(client)
    confirm = client.get(f"/jobs/{second}/stop")
    assert confirm.status_code == 200
    page = confirm.get_data(as_text=True)
    assert 'id="confirm"' in page and f'action="/jobs/{second}/stop"' in page
    assert _requests(app) == []  # showing the confirmation writes nothing
    resp = client.post(f"/jobs/{second}/stop", data={"csrf_token": csrf_of(page)})
    assert resp.status_code == 303
    assert resp.headers["Location"].endswith(f"/jobs/{second}?stop=requested")
    assert _requests(app) == [(second, 2, "dashboard")]
    again = client.post(f"/jobs/{second}/stop", data={"csrf_token": csrf})
    assert again.status_code == 303 and len(_requests(app)) == 1  # the same run: no change
    listed = client.get("/workers").get_data(as_text=True)
    assert "stop requested" in listed and f'href="/jobs/{second}/stop"' not in listed
    job_page = client.get(f"/jobs/{second}?stop=requested").get_data(as_text=True)
    assert 'id="stop-requested"' in job_page


@SQLITE
def test_stop_of_a_row_that_does_not_run_or_without_the_token_is_refused(busy):
    app, client, (first, _, done) = busy
    csrf = login(client)
    shown = client.get(f"/jobs/{done}/stop")
    assert shown.status_code == 409
    assert 'id="not-running"' in shown.get_data(as_text=True)
    assert 'id="confirm"' not in shown.get_data(as_text=True)
    refused = client.post(f"/jobs/{done}/stop", data={"csrf_token": csrf})
    assert refused.status_code == 409
    assert (f"Job #{done} is completed: only a running job can be stopped."
            in refused.get_data(as_text=True))
    assert client.post("/jobs/999999/stop", data={"csrf_token": csrf}).status_code == 404
    assert client.post(f"/jobs/{first}/stop", data={}).status_code == 403
    assert _requests(app) == []
    # the Job page of a running row links to the same confirmation
    assert f'href="/jobs/{first}/stop" class="stop"' in client.get(f"/jobs/{first}").get_data(
        as_text=True)
