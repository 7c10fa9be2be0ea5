"""/metrics stays small and consistent: rows of 300 unregistered types in 300 queues add a
fixed number of series (labelled `other`), registered types keep their label, no `_created`
series; the gauges read from the database are the same in two dashboard processes and equal
the figures the dashboard shows, while the per-process counters say so in their HELP text."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from cronjobs import store
from cronjobs.store.models import cronjob_queue
from cronjobs.testing import FrozenClock
from cronjobs.web.view import web_engine
from dashboard_helpers import BEARER, TOKEN, recent_t0, web_client

BUCKETS = 13  # 12 bounds and +Inf


def scrape(client, statements: list | None = None) -> tuple[dict, dict]:
    """`({(sample name, labels): value}, {family name: (type, help)})` of one scrape; the
    SQL it ran is appended to `statements` when given."""
    engine = web_engine(client.application.extensions["cronjobs_app"])  # the pages' engine

    def record(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    if statements is not None:
        sa.event.listen(engine, "before_cursor_execute", record)
    try:
        resp = client.get("/metrics", headers=BEARER)
    finally:
        if statements is not None:
            sa.event.remove(engine, "before_cursor_execute", record)
    assert resp.status_code == 200
    samples, families = {}, {}
    for family in text_string_to_metric_families(resp.get_data(as_text=True)):
        families[family.name] = (family.type, family.documentation)
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, families


def finished_rows(app, n: int, job_type: str, **values) -> None:
    """Insert `n` finished rows; `{i}` in `job_type` and in a `queue` value is the row's number."""
    now = app.clock.now()
    base = {"queue": "default", "status": "completed", "priority": 5, "payload": "{}",
            "attempts": 1, "max_attempts": 3, "created_at": now, "updated_at": now,
            "started_at": now - timedelta(seconds=2), "finished_at": now, **values}
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.insert(), [
            {**base, "type": job_type.format(i=i), "queue": base["queue"].format(i=i)}
            for i in range(n)])


def test_rows_of_unregistered_types_and_queues_do_not_grow_the_series(make_app):
    clock = FrozenClock(recent_t0())
    app = make_app(clock=clock, dashboard_token=TOKEN)
    client = web_client(app)
    scrape(client)  # the counters start here
    clock.advance(60)
    finished_rows(app, 5, "test.shape.execute")
    finished_rows(app, 1, "test.shape.execute", status="pending", queue="maintenance",
                  finished_at=None, started_at=None)
    before: list[str] = []
    known, _ = scrape(client, before)
    clock.advance(60)
    finished_rows(app, 300, "gone.kind{i}.execute")  # of handlers since removed, and
    finished_rows(app, 300, "gone.wait{i}.execute", status="pending", queue="gone-{i}",
                  finished_at=None, started_at=None)  # each in a queue of its own
    statements: list[str] = []
    after, families = scrape(client, statements)
    # the SQL does not grow with the queues either: `other` is read by one statement per
    # status and one for its due rows
    assert len(statements) == len(before) + 3 + 1
    # one `other` type: finished{completed} + the histogram's buckets, sum and count; one
    # `other` queue: rows per status (3), due rows, oldest due age
    assert len(after) - len(known) == (1 + BUCKETS + 2) + (3 + 1 + 1)
    assert len(after) < 100
    other = ("type", "other")
    assert after[("cronjobs_jobs_finished_total", (("status", "completed"), other))] == 300
    assert after[("cronjobs_job_duration_seconds_count", (other,))] == 300
    assert after[("cronjobs_due_rows", (("queue", "other"),))] == 300
    assert after[("cronjobs_rows", (("queue", "other"), ("status", "pending")))] == 300
    shape = ("type", "test.shape.execute")  # a registered type keeps its label
    assert after[("cronjobs_jobs_finished_total", (("status", "completed"), shape))] == 5
    assert after[("cronjobs_job_duration_seconds_bucket", (("le", "5.0"), shape))] == 5
    assert not [name for name, _ in after if name.endswith("_created")]
    assert not [f for f in families if "gone" in f]


def test_two_dashboard_processes_give_the_same_gauges(make_app):
    clock = FrozenClock(recent_t0())
    first = make_app(clock=clock, dashboard_token=TOKEN)
    one = web_client(first)
    scrape(one)  # this process counts from here
    clock.advance(60)
    finished_rows(first, 4, "test.shape.execute")
    finished_rows(first, 3, "test.shape.execute", status="failed", error="boom")
    finished_rows(first, 2, "test.count.discover")
    finished_rows(first, 1, "test.shape.execute", finished_at=clock.now() - timedelta(hours=2))
    clock.advance(60)
    second = make_app(clock=clock, dashboard_token=TOKEN)  # another process, started later
    a, families = scrape(one)
    b, _ = scrape(web_client(second))
    gauges = {name for name, (kind, _) in families.items() if kind == "gauge"}
    assert {k: v for k, v in a.items() if k[0] in gauges} == \
        {k: v for k, v in b.items() if k[0] in gauges}
    assert a[("cronjobs_completed_execute_rows", (("window", "1h"),))] == 4
    assert a[("cronjobs_completed_execute_rows", (("window", "24h"),))] == 5
    assert a[("cronjobs_failed_rows_last_hour", ())] == 3
    assert a[("cronjobs_status_rows", (("status", "completed"),))] == 7
    with first.engine.connect() as conn:  # the figures the dashboard shows
        speed = store.views.throughput(conn, clock.now())
        failed = store.views.failed_counts(conn, clock.now() - timedelta(hours=1))
        counts = store.views.count_by_status(conn)
    assert (speed["hour"][0], speed["day"][0], failed["since"][0]) == (4, 5, 3)
    assert {s: n for s, (n, _) in counts.items()} == \
        {dict(k[1])["status"]: v for k, v in a.items() if k[0] == "cronjobs_status_rows"}
    # counters count what finished while their process ran: they differ, and say so
    shape = (("status", "completed"), ("type", "test.shape.execute"))
    assert a[("cronjobs_jobs_finished_total", shape)] == 4
    assert ("cronjobs_jobs_finished_total", shape) not in b
    for name, (kind, text) in families.items():
        assert ("Per process" in text) == (kind in ("counter", "histogram")), name
        assert ("From the database" in text) == (kind == "gauge"), name
