"""Helpers for the dashboard tests: a logged-in Flask test client and row factories."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime

import sqlalchemy as sa

from cronjobs.actions import bulk
from cronjobs.app import App
from cronjobs.store.models import cronjob_queue
from cronjobs.web import create_app

TOKEN = "test-dashboard-token-123"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def web_client(app: App):
    """A test client of the dashboard of `app` (not logged in)."""
    return create_app(app).test_client()


def csrf_of(html: str) -> str:
    """The CSRF token in a rendered page."""
    return CSRF.search(html)[1]


def login(client) -> str:
    """Log `client` in through the form; returns a CSRF token of its session."""
    page = client.get("/login").get_data(as_text=True)
    resp = client.post("/login", data={"token": TOKEN, "csrf_token": csrf_of(page), "next": "/"})
    assert resp.status_code == 303, resp.get_data(as_text=True)
    return csrf_of(client.get("/").get_data(as_text=True))


def add_row(app: App, **values) -> int:
    """Insert a `cronjob_queue` row directly (defaults: a pending test.summary.execute)."""
    now = app.clock.now()
    row = {"type": "test.summary.execute", "queue": "default", "status": "pending",
           "priority": 5, "payload": "{}", "attempts": 0, "max_attempts": 3,
           "created_at": now, "updated_at": now, **values}
    for key in ("payload", "result_payload"):
        if isinstance(row.get(key), dict):
            row[key] = json.dumps(row[key])
    with app.engine.begin() as conn:
        return conn.execute(cronjob_queue.insert().values(**row)).inserted_primary_key[0]


def add_rows(app: App, n: int, **values) -> None:
    """Insert `n` rows in one statement."""
    now = app.clock.now()
    base = {"type": "test.summary.execute", "queue": "default", "status": "pending",
            "priority": 5, "payload": "{}", "attempts": 0, "max_attempts": 3,
            "created_at": now, "updated_at": now, **values}
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.insert(), [dict(base, title=f"row {i}") for i in range(n)])


def row(app: App, job_id: int) -> dict | None:
    """Row `job_id` as a dict."""
    with app.engine.connect() as conn:
        found = conn.execute(sa.select(cronjob_queue).where(cronjob_queue.c.id == job_id)
                             ).mappings().first()
    return dict(found) if found else None


def count(app: App, **where) -> int:
    """Rows matching column == value conditions."""
    stmt = sa.select(sa.func.count()).select_from(cronjob_queue)
    for key, value in where.items():
        stmt = stmt.where(cronjob_queue.c[key] == value)
    with app.engine.connect() as conn:
        return conn.execute(stmt).scalar_one()


T0 = datetime(2026, 1, 5, 12, 0, 5)


def recent_t0() -> datetime:
    """A frozen start near the real time, at second 5 of a minute on a 5-minute boundary
    (slots of `*/5` tasks start there). Tests that write heartbeats use it: heartbeat ages
    may be judged by the database's clock, which a frozen clock far away would contradict."""
    from cronjobs.clock import utcnow

    now = utcnow()
    return now.replace(minute=now.minute - now.minute % 5, second=5, microsecond=0)


def db_now(app) -> datetime:
    """The database clock's now: heartbeats are judged by it (write `last_seen_at` with it)."""
    from cronjobs import store

    with app.engine.connect() as conn:
        return store.database_now(conn)


def wait_operation(app: App, operation_id: int, timeout: float = 60.0) -> dict:
    """Wait until bulk operation `operation_id` is no longer running (its batches run in a
    background thread of the dashboard); returns its row."""
    deadline = time.monotonic() + timeout
    while True:
        op = bulk.get(app, operation_id)
        if op["status"] != "running":
            return op
        assert time.monotonic() < deadline, f"operation still running after {timeout} s: {op}"
        time.sleep(0.02)
