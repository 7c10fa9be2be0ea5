"""`health` warns about a pause older than `health_pause_warn_seconds` and about due rows
held longer than `health_held_warn_seconds` by a block or a full concurrency limit (a paused
or blocked queue is not "stuck"); `/metrics` counts the held rows per queue, type and reason,
never per limit key; on MariaDB and PostgreSQL."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from cronjobs import CronJobHandler, store
from cronjobs.health import run_health
from cronjobs.testing import FrozenClock
from dashboard_helpers import BEARER, TOKEN, add_row, recent_t0, web_client
from test_health import beat

SERVERS = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
KIND = "test.summary.execute"


class OneAtATimeExecute(CronJobHandler):
    """One row per chat at a time."""

    TYPE = "test.oneatatime.execute"
    QUEUE = "broadcast"
    CONCURRENCY = 1
    LIMIT_KEY = "chat_id"

    def handle(self, payload, job):
        return True


def flow_problems(app) -> dict[str, object]:
    report = run_health(app)
    return {p.key: p for p in report.problems if p.key.startswith(("pause:", "held:", "stuck:"))}


def held_series(text: str) -> dict[tuple[str, str, str], float]:
    found = re.findall(r'^cronjobs_held_rows\{queue="([^"]*)",reason="([^"]*)",type="([^"]*)"\} '
                       r"(\S+)$", text, re.M)
    return {(queue, job_type, reason): float(n) for queue, reason, job_type, n in found}


@SERVERS
def test_health_warns_about_an_old_pause_and_rows_held_too_long(make_app):
    T0 = recent_t0()
    app = make_app(clock=FrozenClock(T0), health_pause_warn_seconds=3600,
                   health_held_warn_seconds=900)
    app.handlers.register(OneAtATimeExecute.TYPE, OneAtATimeExecute)
    beat(app, "w1", "default,maintenance,broadcast")
    with app.engine.begin() as conn:
        store.flow.pause(conn, "queue", "default", now=T0 - timedelta(minutes=10), by="ops@h")
        store.flow.pause(conn, "type", KIND, now=T0 - timedelta(hours=2), reason="vendor down",
                         by="ops@h")
        store.flow.block(conn, OneAtATimeExecute.TYPE, "4711", now=T0, reason="FloodWait",
                         until=T0 + timedelta(minutes=5))
    old = T0 - timedelta(minutes=20)
    add_row(app, created_at=old)  # paused twice: in a paused queue, of a paused type
    for key, status in (("4711", "pending"), ("4711", "pending"), ("A", "running"),
                        ("A", "pending"), ("B", "pending")):
        add_row(app, type=OneAtATimeExecute.TYPE, queue="broadcast", limit_key=key,
                status=status, created_at=old)
    problems = flow_problems(app)
    assert set(problems) == {f"pause:type:{KIND}",
                             f"held:broadcast:{OneAtATimeExecute.TYPE}:blocked",
                             f"held:broadcast:{OneAtATimeExecute.TYPE}:limited"}, problems
    pause = problems[f"pause:type:{KIND}"]
    assert pause.status == "warn" and "paused for 7200 s by ops@h (vendor down)" in pause.message
    blocked = problems[f"held:broadcast:{OneAtATimeExecute.TYPE}:blocked"]
    assert blocked.message.startswith(f"2 due row(s) of {OneAtATimeExecute.TYPE} in queue "
                                      "'broadcast' are blocked; the oldest has waited 1200 s")
    limited = problems[f"held:broadcast:{OneAtATimeExecute.TYPE}:limited"]
    assert limited.message.startswith("1 due row(s)")  # key A's; key B is free to start
    flow = next(c for c in run_health(app).checks if c.name == "flow")
    assert flow.data["held_rows"] == {"rate_limited": 0, "limited": 1, "paused": 1, "blocked": 2}

    # younger than the settings: nothing to say; the held default queue is not "stuck"
    with app.engine.begin() as conn:
        store.flow.resume(conn, "type", KIND)
        store.flow.unblock(conn, job_type=OneAtATimeExecute.TYPE, limit_key="4711")
    problems = flow_problems(app)
    assert f"pause:type:{KIND}" not in problems and "stuck:default" not in problems
    assert set(problems) == {f"held:broadcast:{OneAtATimeExecute.TYPE}:limited"}


@SERVERS
def test_metrics_count_held_rows_per_queue_type_and_reason_never_per_key(make_app):
    T0 = recent_t0()
    app = make_app(clock=FrozenClock(T0), dashboard_token=TOKEN)
    app.handlers.register(OneAtATimeExecute.TYPE, OneAtATimeExecute)
    with app.engine.begin() as conn:
        store.flow.pause(conn, "queue", "default", now=T0, by="ops@h")
        for key in ("chat-4711", "chat-4712"):
            store.flow.block(conn, OneAtATimeExecute.TYPE, key, now=T0,
                             until=T0 + timedelta(minutes=5), reason="FloodWait")
    for _ in range(3):
        add_row(app)
    for key in ("chat-4711", "chat-4712", "chat-4712", "chat-9"):
        add_row(app, type=OneAtATimeExecute.TYPE, queue="broadcast", limit_key=key)
    add_row(app, type="gone.type.execute", queue="gone-queue", limit_key="chat-1")
    with app.engine.begin() as conn:
        store.flow.block(conn, "gone.type.execute", None, now=T0, until=T0 + timedelta(hours=1))
    text = web_client(app).get("/metrics", headers=BEARER).get_data(as_text=True)
    assert held_series(text) == {
        ("default", KIND, "paused"): 3.0,
        ("broadcast", OneAtATimeExecute.TYPE, "blocked"): 3.0,
        ("other", "other", "blocked"): 1.0,
    }
    assert "chat-" not in text  # never a label per key
    assert "# TYPE cronjobs_held_rows gauge" in text
