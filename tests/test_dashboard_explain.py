"""No page's SQL scans the whole table: every SELECT on `cronjob_queue` that the
pages, JSON lists, /metrics, /health and the bulk actions' confirmation run is captured and
EXPLAINed on MariaDB with 30,000 rows (made like bench/dashboard_pages.py, by one INSERT ...
SELECT); none may be a full table scan (`ALL`) or a full index scan (`index` over more than
1,000 rows: the newest page walks the primary key backwards and stops at its LIMIT, which
EXPLAIN also calls `index`, with `rows` = the limit)."""

from __future__ import annotations

import importlib.util

import pytest
import sqlalchemy as sa

from conftest import ROOT
from cronjobs.health import health_engine
from cronjobs.web.view import web_engine
from dashboard_helpers import BEARER, TOKEN, web_client

ROWS = 30_000


def _bench():
    spec = importlib.util.spec_from_file_location("bench_dashboard_pages",
                                                  ROOT / "bench" / "dashboard_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bulk_forms(n: int) -> list[dict]:
    """Bulk actions on the bench rows: all matching the Queue's filters, a Failed group,
    ticked rows."""
    mid = n // 2
    failed = mid - mid % 100 + 92  # a failed execute row of the bench rows
    queue = {"scope": "all", "source": "queue"}
    return [dict(queue, action="retry", status="failed"), dict(queue, action="cancel"),
            dict(queue, action="cancel", task="bench-sync"),
            dict(queue, action="delete", type="bench.mail.execute"),
            dict(queue, action="delete", parent=str(mid - (mid - 1) % 10)),
            dict(queue, action="retry", status="failed", task="bench-sync"),
            dict(queue, action="delete", title="target 999"),  # in windows of ids
            {"scope": "all", "source": "failed", "action": "retry", "group": str(failed)},
            {"scope": "all", "source": "failed", "action": "delete", "type": "bench.sync.execute"},
            {"scope": "ticked", "source": "queue", "action": "delete",
             "id": [str(i) for i in range(mid, mid + 500)]}]


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_every_list_query_uses_an_index(make_app):
    bench = _bench()
    app = make_app(dashboard_token=TOKEN)
    bench.register_bench_types(app.handlers)
    bench.fill(app.engine, ROWS)
    with app.engine.begin() as conn:  # rows of removed handlers in 50 queues: /metrics's `other`
        conn.exec_driver_sql("UPDATE cronjob_queue SET queue = CONCAT('gone-', MOD(id, 50)) "
                             "WHERE MOD(id, 97) = 0")
        conn.exec_driver_sql("ANALYZE TABLE cronjob_queue").all()
    captured: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT") and "cronjob_queue" in statement:
            captured.append((statement, parameters))

    # the pages and the health checks read through engines of their own
    engines = [app.engine, web_engine(app), health_engine(app)]
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", capture)
    client = web_client(app)
    for path in bench.pages(ROWS):
        resp = client.get(path, headers=BEARER)
        assert resp.status_code in (200, 503), (path, resp.get_data(as_text=True)[:300])
    for form in bulk_forms(ROWS):  # a bulk action's confirmation counts its rows
        resp = client.post("/operations/confirm", data=form, headers=BEARER)
        assert resp.status_code == 200, (form, resp.get_data(as_text=True)[:300])
    for engine in engines:
        sa.event.remove(engine, "before_cursor_execute", capture)
    assert len(captured) > 30
    seen, scans = set(), []
    with app.engine.connect() as conn:
        for statement, params in captured:
            shape = " ".join(statement.split())
            if shape in seen:
                continue
            seen.add(shape)
            plan = conn.exec_driver_sql("EXPLAIN " + statement, params).mappings().all()
            for step in plan:
                if step["table"] != "cronjob_queue":
                    continue
                full_index = step["type"] == "index" and int(step["rows"] or 0) > 1000
                if step["type"] == "ALL" or full_index:
                    scans.append((shape[:300], dict(step)))
    assert len(seen) >= 15  # the distinct list queries
    assert scans == [], "\n\n".join(f"{s}\n{p}" for s, p in scans)
