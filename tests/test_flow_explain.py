"""The flow-control reads (the Pauses & blocks page, the Tasks pages' pause state, the
held-rows gauge of /metrics and the `flow` health check) use an index: with 30,000 rows on
MariaDB, a paused queue, a paused type, blocked keys, a blocked whole type and a
concurrency- and rate-limited type with running rows, EXPLAIN of every SELECT on
`cronjob_queue` they run shows no full table scan and no full index scan over more than 1,000
rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from cronjobs import CronJobHandler, store
from cronjobs.health import health_engine, run_health
from cronjobs.web.view import web_engine
from dashboard_helpers import BEARER, TOKEN, web_client
from test_dashboard_explain import ROWS, _bench


class MailExecute(CronJobHandler):
    """The bench's mail rows, one at a time and 10 a second per recipient."""

    TYPE = "bench.mail.execute"
    CONCURRENCY = 1
    RATE_LIMIT = "10/s"
    LIMIT_KEY = "to"

    def handle(self, payload, job):
        return True


def _explain_scans(conn, captured) -> tuple[set, list]:
    seen, scans = set(), []
    for statement, params in captured:
        shape = " ".join(statement.split())
        if shape in seen:
            continue
        seen.add(shape)
        for step in conn.exec_driver_sql("EXPLAIN " + statement, params).mappings().all():
            if step["table"] != "cronjob_queue":
                continue
            if step["type"] == "ALL" or (step["type"] == "index" and int(step["rows"] or 0) > 1000):
                scans.append((shape[:400], dict(step)))
    return seen, scans


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_every_flow_query_uses_an_index(make_app):
    bench = _bench()
    app = make_app(dashboard_token=TOKEN)
    bench.register_bench_types(app.handlers)
    app.handlers.unregister(MailExecute.TYPE)  # the bench's mail rows, limited
    app.handlers.register(MailExecute.TYPE, MailExecute, "bench")
    bench.fill(app.engine, ROWS)
    now = app.clock.now()
    with app.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE cronjob_queue SET limit_key = CONCAT('to-', MOD(id, 7)) "
                             "WHERE type = 'bench.mail.execute'")
        conn.exec_driver_sql("UPDATE cronjob_queue SET limit_key = 'to-free' WHERE type = "
                             "'bench.mail.execute' AND status = 'pending' AND MOD(id, 2) = 0")
        conn.exec_driver_sql("ANALYZE TABLE cronjob_queue").all()
        store.flow.pause(conn, "queue", "maintenance", now=now, by="ops@h")
        store.flow.pause(conn, "type", "bench.sync.discover", now=now, by="ops@h")
        store.flow.pause(conn, "task", "bench-sync", now=now, by="ops@h")
        for key in range(4):
            store.flow.block(conn, MailExecute.TYPE, f"to-{key}", now=now,
                             until=now + timedelta(minutes=5))
        store.flow.block(conn, "bench.sync.execute", None, now=now,
                         until=now + timedelta(minutes=5))
    captured: list = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT") and "cronjob_queue" in statement:
            captured.append((statement, parameters))

    engines = [app.engine, web_engine(app), health_engine(app)]
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", capture)
    client = web_client(app)
    for path in ("/flow", "/tasks", "/tasks/bench-sync", "/tasks/bench-mail", "/metrics"):
        resp = client.get(path, headers=BEARER)
        assert resp.status_code == 200, (path, resp.get_data(as_text=True)[:300])
    flow = next(c for c in run_health(app).checks if c.name == "flow")
    for engine in engines:
        sa.event.remove(engine, "before_cursor_execute", capture)
    held = flow.data["held_rows"]
    assert held["paused"] > 0 and held["blocked"] > 0 and held["limited"] > 0, held
    assert held["rate_limited"] > 0, held  # key to-free: rows beyond 10 a second
    held_sql = [s for s, _ in captured if "limit_key" in s or "LIMIT" in s]
    assert len(held_sql) >= 5
    with app.engine.connect() as conn:
        seen, scans = _explain_scans(conn, captured)
    assert scans == [], "\n\n".join(f"{s}\n{p}" for s, p in scans)
