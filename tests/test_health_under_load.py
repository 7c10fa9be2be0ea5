"""Health probes never take the pages down: forty concurrent /health calls share one run
and `/` still answers in under a second, and a table locked by another connection makes
`/` and `/workers` answer 503 within seconds (never 500 or 400), on a served dashboard."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from cronjobs.web.server import open_server
from dashboard_helpers import BEARER, TOKEN
from test_health_probes import make_healthy

SERVERS = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
CALLERS = 40


@contextmanager
def served(app):
    """The dashboard of `app` on a real threaded server; yields (base URL, Flask app)."""
    server, url, _ = open_server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield url, server.app
    finally:
        server.shutdown()
        server.server_close()


def fetch(url: str, bearer: bool = True, timeout: float = 60) -> tuple[int, str, float]:
    """GET `url`: (status, body, seconds taken)."""
    started = time.monotonic()
    request = urllib.request.Request(url, headers=BEARER if bearer else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status, body = resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    return status, body, time.monotonic() - started


@SERVERS
def test_forty_concurrent_health_calls_share_one_run_and_leave_the_pages_fast(make_app):
    app = make_app(dashboard_token=TOKEN, health_memory_warn_percent=100,
                   health_memory_fail_percent=100, health_disk_warn_percent=100,
                   health_disk_fail_percent=100)
    make_healthy(app)
    with served(app) as (base, web):
        assert fetch(base + "/tasks")[0] == 200  # the page's first visit creates nothing later
        go = threading.Barrier(CALLERS + 1)
        answers: list[tuple[int, str, float]] = []

        def call() -> None:
            go.wait()
            answers.append(fetch(base + "/health"))

        callers = [threading.Thread(target=call) for _ in range(CALLERS)]
        for caller in callers:
            caller.start()
        go.wait()
        status, page, page_seconds = fetch(base + "/tasks")
        for caller in callers:
            caller.join(30)
        runs = web.extensions["cronjobs_health"].runs
    slowest = max(a[2] for a in answers)
    print(f"\n{CALLERS} concurrent /health: {runs} run(s), slowest {slowest:.2f} s; "
          f"/ meanwhile in {page_seconds:.3f} s")
    assert status == 200 and 'data-task="test-count"' in page
    assert page_seconds < 1.0, page_seconds
    assert len(answers) == CALLERS and {a[0] for a in answers} == {200}, answers[:3]
    reports = {(r["at"], r["duration_ms"]) for r in (json.loads(a[1]) for a in answers)}
    assert runs == len(reports) <= 2, (runs, reports)  # one run (two if the first was done)
    assert all('"status":"ok"' in a[1].replace(" ", "") for a in answers)


def lock_tables(holder) -> None:
    """Lock the tables the pages read, on the connection `holder`."""
    if holder.dialect.name == "postgresql":
        holder.exec_driver_sql("LOCK TABLE cronjob_queue, cronjob_runtime IN ACCESS EXCLUSIVE MODE")
    else:
        holder.exec_driver_sql("LOCK TABLES cronjob_queue WRITE, cronjob_runtime WRITE")


def unlock_tables(holder) -> None:
    if holder.dialect.name != "postgresql":
        holder.exec_driver_sql("UNLOCK TABLES")
    holder.rollback()


@SERVERS
def test_a_locked_table_is_503_within_seconds_on_every_page(make_app, db_url):
    timeout = 2.0
    app = make_app(dashboard_token=TOKEN, dashboard_db_timeout_seconds=timeout)
    make_healthy(app)
    locker = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with served(app) as (base, web), locker.connect() as holder:
        web.config["CRONJOBS_OVERVIEW_CACHE_SECONDS"] = 0  # else "/" answers from its snapshot
        assert fetch(base + "/")[0] == 200
        lock_tables(holder)
        try:
            for path in ("/", "/tasks", "/workers", "/api/jobs"):
                status, body, seconds = fetch(base + path)
                print(f"\n{path} with the table locked: {status} in {seconds:.2f} s")
                assert status == 503 and seconds < timeout + 2, (path, status, seconds, body[:300])
                assert "did not answer in time" in body
            # more requests than the pages' pool has connections (5 + 5): still 503, not 500
            crowd: list[tuple[int, str, float]] = []
            threads = [threading.Thread(target=lambda: crowd.append(fetch(base + "/")))
                       for _ in range(14)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            print(f"14 concurrent / with the table locked: {sorted({c[0] for c in crowd})}, "
                  f"slowest {max(c[2] for c in crowd):.2f} s")
            assert [c[0] for c in crowd] == [503] * 14, [(c[0], c[1][:200]) for c in crowd]
            assert max(c[2] for c in crowd) < 2 * timeout + 2
            # the probes that read no locked table still answer at once
            assert fetch(base + "/health/live", bearer=False)[0] == 200
            status, _, seconds = fetch(base + "/health/ready", bearer=False)
            assert status == 200 and seconds < 1, seconds
        finally:
            unlock_tables(holder)
        assert fetch(base + "/")[0] == 200
        assert fetch(base + "/workers")[0] == 200
    locker.dispose()
