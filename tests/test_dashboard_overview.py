"""The Overview page and its JSON on SQLite, MariaDB and PostgreSQL: rows finished per minute
over the last hour and per hour over the last day (completed, failed, retries), queue depth,
running rows and the oldest due row per queue, busy slots and live workers; finished hours
read once; the SVG charts carry the numbers; the JSON routes need the token."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from cronjobs.clock import FrozenClock
from cronjobs.store import stats
from cronjobs.store.models import cronjob_worker
from dashboard_helpers import BEARER, TOKEN, add_row, db_now, web_client

T0 = datetime(2026, 1, 5, 12, 30, 5)  # 30 min 5 s into the hour
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def clock():
    return FrozenClock(T0)


@pytest.fixture
def app(make_app, clock):
    return make_app(clock=clock, dashboard_token=TOKEN)


def client_of(app, cache_seconds: float = 0.0):
    client = web_client(app)
    client.application.config["CRONJOBS_OVERVIEW_CACHE_SECONDS"] = cache_seconds
    return client


def finished(app, at: datetime, status: str = "completed", attempts: int = 1, **values) -> int:
    return add_row(app, status=status, attempts=attempts, started_at=at - timedelta(seconds=2),
                   finished_at=at, **values)


def overview(client) -> dict:
    resp = client.get("/api/overview", headers=BEARER)
    assert resp.status_code == 200, resp.get_data(as_text=True)[:500]
    return resp.get_json()


def test_rows_finished_are_counted_per_minute_and_per_hour(app):
    finished(app, T0 - timedelta(seconds=1))                       # this minute
    finished(app, T0 - timedelta(seconds=5))                       # 12:30:00: this minute too
    finished(app, T0 - timedelta(seconds=6), "failed", attempts=3)  # 12:29:59: 2 retries
    finished(app, T0 - timedelta(minutes=59, seconds=5))           # 11:31:00: the first minute
    finished(app, T0 - timedelta(minutes=59, seconds=6))           # 11:30:59: only per hour
    finished(app, T0 - timedelta(hours=23, minutes=30, seconds=5))  # 13:00 yesterday: hour 0
    finished(app, T0 - timedelta(hours=23, minutes=30, seconds=6))  # 12:59:59: out of the day
    add_row(app, status="pending", attempts=2)                     # not finished: not counted
    add_row(app, status="cancelled", finished_at=T0)               # cancelled: not counted
    data = overview(client_of(app))
    minutes, hours = data["minutes"], data["hours"]
    assert len(minutes) == 60 and len(hours) == 24
    assert minutes[-1] == {"at": "2026-01-05T12:30:00Z", "completed": 2, "failed": 0,
                           "expired": 0, "retried": 0}
    assert minutes[-2] == {"at": "2026-01-05T12:29:00Z", "completed": 0, "failed": 1,
                           "expired": 0, "retried": 2}
    assert minutes[0]["at"] == "2026-01-05T11:31:00Z" and minutes[0]["completed"] == 1
    assert data["last_hour"] == {"completed": 3, "failed": 1, "retried": 2}
    assert hours[0] == {"at": "2026-01-04T13:00:00Z", "completed": 1, "failed": 0,
                        "expired": 0, "retried": 0}
    assert hours[-1]["at"] == "2026-01-05T12:00:00Z" and hours[-1]["completed"] == 2
    assert hours[-2]["completed"] == 2  # 11:31:00 and 11:30:59
    assert data["last_day"] == {"completed": 5, "failed": 1, "retried": 2}
    with app.engine.connect() as conn:  # the store function on its own: any start, any step
        buckets = stats.finished_buckets(conn, T0 - timedelta(minutes=1), 30, 4)
    assert [(b["completed"], b["failed"]) for b in buckets] == [(0, 0), (2, 1), (0, 0), (0, 0)]


def test_queues_show_depth_running_due_and_the_oldest_due_row(app):
    add_row(app, queue="default", created_at=T0 - timedelta(minutes=10))
    add_row(app, queue="default", created_at=T0 - timedelta(minutes=2),
            scheduled_at=T0 - timedelta(minutes=1))
    add_row(app, queue="default", attempts=1, scheduled_at=T0 + timedelta(minutes=4))  # later
    add_row(app, queue="maintenance", status="running", started_at=T0)
    add_row(app, queue="idle", status="completed", finished_at=T0)  # nothing live: not listed
    client = client_of(app)
    queues = {q["queue"]: q for q in overview(client)["queues"]}
    assert set(queues) == {"default", "maintenance"}
    assert queues["default"]["pending"] == [3, False] and queues["default"]["due"] == [2, False]
    assert queues["default"]["oldest_due_at"] == "2026-01-05T12:20:05Z"
    assert queues["maintenance"]["running"] == [1, False]
    assert queues["maintenance"]["oldest_due_at"] is None
    text = client.get("/", headers=BEARER).get_data(as_text=True)
    row = text.split('data-queue="default"', 1)[1].split("</tr>", 1)[0]
    assert 'title="2026-01-05 12:20:05 UTC">10 min. ago</time>' in row
    assert "<h1>Overview</h1>" in text and 'data-live-url="/api/overview"' in text


def test_busy_slots_and_live_workers(app):
    for _ in range(3):
        add_row(app, status="running", started_at=T0)
    now = db_now(app)  # heartbeats are judged by the database's clock
    with app.engine.begin() as conn:
        conn.execute(cronjob_worker.insert(), [
            {"id": "host-a:1", "host": "host-a", "pid": 1, "queues": "default",
             "status": "running", "started_at": now, "last_seen_at": now, "jobs_done": 4,
             "current_jobs": "1,2"},
            {"id": "host-b:9", "host": "host-b", "pid": 9, "queues": "default",
             "status": "running", "started_at": now - timedelta(hours=1),
             "last_seen_at": now - timedelta(minutes=5), "jobs_done": 0, "current_jobs": ""}])
    client = client_of(app)
    data = overview(client)
    assert data["running"] == [3, False] and data["workers"] == 1
    text = client.get("/", headers=BEARER).get_data(as_text=True)
    assert re.search(r'id="busy">3<', text) and re.search(r'id="workers-live">1<', text)
    workers = text.split('id="live-workers"', 1)[1].split("</table>", 1)[0]
    assert "host-a:1" in workers and "<td>2</td>" in workers and "host-b:9" not in workers
    assert "1 stopped reporting" not in workers  # said only when no worker is live


def test_settled_hours_are_read_once_and_the_open_hour_every_time(app, clock):
    finished(app, T0 - timedelta(hours=3))
    client = client_of(app)
    assert overview(client)["last_day"]["completed"] == 1
    finished(app, T0 - timedelta(hours=3, minutes=1))  # written late into a settled hour
    finished(app, T0 - timedelta(minutes=1))           # the open hour
    clock.advance(1)
    data = overview(client)
    assert data["last_day"]["completed"] == 2  # the settled hour was kept from the first read
    assert data["hours"][-4]["completed"] == 1 and data["hours"][-1]["completed"] == 1
    fresh = overview(client_of(app))  # another dashboard process reads it whole
    assert fresh["last_day"]["completed"] == 3


@SQLITE
def test_one_snapshot_serves_requests_for_a_few_seconds(app, clock):
    client = client_of(app, cache_seconds=3)
    assert overview(client)["last_hour"]["completed"] == 0
    finished(app, T0 - timedelta(seconds=1))
    clock.advance(2)
    assert overview(client)["last_hour"]["completed"] == 0  # the cached snapshot
    clock.advance(1.5)
    assert overview(client)["last_hour"]["completed"] == 1


@SQLITE
def test_charts_are_svg_with_the_numbers_in_them(app):
    finished(app, T0 - timedelta(seconds=3))
    finished(app, T0 - timedelta(seconds=2), "failed", attempts=2)
    text = client_of(app).get("/", headers=BEARER).get_data(as_text=True)
    hour = text.split('<svg class="chart" id="chart-hour"', 1)[1].split("</svg>", 1)[0]
    assert 'data-total="2"' in hour and 'role="img"' in hour
    assert hour.count('class="seg-completed"') == 1 and hour.count('class="seg-failed"') == 1
    assert hour.count('class="marker"') == 1  # one retry, drawn as a dot
    assert "<title>12:30 UTC: 1 completed, 1 failed, 1 retries</title>" in hour
    assert 'id="chart-day"' in text and "<script" not in hour
    assert "http://" not in text.split("<main>", 1)[1]  # nothing is fetched from elsewhere


@SQLITE
def test_the_json_routes_need_the_token(app):
    job = add_row(app)
    client = client_of(app)
    for path in ("/api/overview", "/api/queue", f"/api/jobs/{job}/live"):
        resp = client.get(path)
        assert resp.status_code == 401 and resp.get_json()["error"].startswith("unauthorized")
        assert client.get(path, headers=BEARER).status_code == 200
