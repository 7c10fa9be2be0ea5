"""The JSON routes the Queue and Job pages poll (on SQLite, MariaDB and PostgreSQL): a row
that changes status in the database is seen in the next answer, with the page's live part
rendered again; the Job page's route says `done` only once the row and its children ended;
the pages carry the route to poll and still work without JavaScript."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cronjobs.clock import FrozenClock
from cronjobs.store.models import cronjob_queue
from dashboard_helpers import BEARER, TOKEN, add_row, web_client

T0 = datetime(2026, 1, 5, 12, 30, 5)


@pytest.fixture
def app(make_app):
    return make_app(clock=FrozenClock(T0), dashboard_token=TOKEN)


def set_status(app, job_id: int, status: str, **values) -> None:
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id)
                     .values(status=status, **values))


def get_json(client, path: str) -> dict:
    resp = client.get(path, headers=BEARER)
    assert resp.status_code == 200, resp.get_data(as_text=True)[:500]
    return resp.get_json()


def test_the_queue_route_follows_a_row_changing_status(app):
    job = add_row(app, title="watch me")
    other = add_row(app, type="test.shape.execute", status="failed", finished_at=T0)
    client = web_client(app)
    text = client.get("/queue?status=pending", headers=BEARER).get_data(as_text=True)
    assert 'data-live-url="/api/queue?status=pending"' in text and 'class="reload"' in text
    first = get_json(client, "/api/queue")
    assert [(r["id"], r["status"]) for r in first["rows"]] == [(other, "failed"), (job, "pending")]
    assert first["counts"]["pending"] == [1, False]
    set_status(app, job, "running", started_at=T0, attempts=1)
    second = get_json(client, "/api/queue")
    assert dict((r["id"], r["status"]) for r in second["rows"])[job] == "running"
    row_html = second["html"].split(f'<tr data-id="{job}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-status="running"' in second["html"] and "st-running" in row_html
    assert second["counts"]["running"] == [1, False] and second["counts"]["pending"] == [0, False]
    filtered = get_json(client, "/api/queue?status=failed")  # the page's own filters
    assert [r["id"] for r in filtered["rows"]] == [other]


def test_the_job_route_is_live_until_the_row_and_its_children_end(app):
    parent = add_row(app, type="test.count.discover", status="completed", started_at=T0,
                     finished_at=T0)
    child = add_row(app, parent_id=parent, title="child")
    client = web_client(app)
    text = client.get(f"/jobs/{parent}", headers=BEARER).get_data(as_text=True)
    assert f'data-live-url="/api/jobs/{parent}/live"' in text
    assert '<noscript><meta http-equiv="refresh" content="2"></noscript>' in text
    live = get_json(client, f"/api/jobs/{parent}/live")
    assert live["done"] is False and live["children"] == {"pending": 1}
    set_status(app, child, "running", started_at=T0 - timedelta(seconds=5), attempts=1)
    live = get_json(client, f"/api/jobs/{parent}/live")
    assert live["children"] == {"running": 1} and "st-running" in live["html"]
    assert get_json(client, f"/api/jobs/{child}/live")["html"].count("Running for 5 sec") == 1
    set_status(app, child, "completed", finished_at=T0)
    live = get_json(client, f"/api/jobs/{parent}/live")
    assert live["done"] is True and live["children"] == {"completed": 1}
    text = client.get(f"/jobs/{parent}", headers=BEARER).get_data(as_text=True)
    assert "data-live-url" not in text and "http-equiv" not in text  # nothing left to follow
    assert client.get("/api/jobs/999999/live", headers=BEARER).status_code == 404
