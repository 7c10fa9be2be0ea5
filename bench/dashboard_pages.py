"""Dashboard pages at 1,000,000 rows: p50/p95 response time of every page on MariaDB.

The rows are made by one `INSERT ... SELECT` from MariaDB's sequence engine (no loop):
90 % completed, 4 % failed (20 distinct errors), 3 % cancelled, 2 % pending, 1 % running;
one discover row per 10 rows with its 9 execute children; two queues; created over the
last 11.5 days. Then each page is fetched through the Flask test client with the token
(the Overview without its 3-second snapshot: each request reads its numbers again).

Usage: .venv/bin/python bench/dashboard_pages.py [ROWS] [REPEATS]
(BENCH_KEEP_DB=name keeps the filled database and reuses it on the next run.)
Needs MariaDB on 127.0.0.1:3306 (root), as `make services` starts it. Prints one line per
page; the database is dropped afterwards.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

MARIADB = "mysql+pymysql://root@127.0.0.1:3306"
ROOT = Path(__file__).resolve().parents[1]

FILL = """
INSERT INTO cronjob_queue (id, type, queue, status, priority, payload, result_payload, error,
    attempts, max_attempts, parent_id, title, scheduled_at, started_at, finished_at,
    locked_until, worker_id, created_at, updated_at)
SELECT s.seq,
  CASE WHEN s.seq % 10 = 1 THEN 'bench.sync.discover' WHEN s.seq % 3 = 0 THEN 'bench.mail.execute'
       ELSE 'bench.sync.execute' END,
  CASE WHEN s.seq % 7 = 0 THEN 'maintenance' ELSE 'default' END,
  @st := CASE WHEN s.seq % 10 = 1 THEN 'completed' WHEN s.seq % 100 < 90 THEN 'completed'
       WHEN s.seq % 100 < 94 THEN 'failed' WHEN s.seq % 100 < 97 THEN 'cancelled'
       WHEN s.seq % 100 < 99 THEN 'pending' ELSE 'running' END,
  5, CONCAT('{"n": ', s.seq, '}'),
  IF(@st = 'completed', CONCAT('{"ok": true, "n": ', s.seq, '}'), NULL),
  IF(@st = 'failed', CONCAT('HTTP 500 from host ', s.seq % 20), NULL),
  IF(@st = 'pending', 0, 1), 3,
  IF(s.seq % 10 = 1, NULL, s.seq - ((s.seq - 1) % 10)),
  CONCAT('sync target ', s.seq), NULL,
  NOW(6) - INTERVAL (:n - s.seq) SECOND,
  IF(@st IN ('completed', 'failed', 'cancelled'),
     NOW(6) - INTERVAL (:n - s.seq) SECOND + INTERVAL 1 SECOND, NULL),
  IF(@st = 'running', NOW(6) + INTERVAL 10 MINUTE, NULL),
  IF(@st IN ('running', 'completed', 'failed'), 'bench-host:1', NULL),
  NOW(6) - INTERVAL (:n - s.seq) SECOND, NOW(6) - INTERVAL (:n - s.seq) SECOND
FROM seq_1_to_{n} s
"""


def fill(engine: sa.Engine, n: int) -> float:
    """Insert `n` rows with one INSERT ... SELECT; returns the seconds it took."""
    started = time.monotonic()
    with engine.begin() as conn:
        conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")  # parents come first anyway
        conn.execute(sa.text(FILL.replace("{n}", str(n))), {"n": n})
        conn.exec_driver_sql("SET SESSION foreign_key_checks = 1")
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE TABLE cronjob_queue").all()
    return time.monotonic() - started


def pages(n: int) -> list[str]:
    """Every dashboard page and JSON list, with filters that hit each query."""
    mid = n // 2
    return ["/", "/tasks", "/tasks/bench-sync", "/api/overview", "/api/queue",
            "/api/queue?status=pending", f"/api/jobs/{mid - (mid - 1) % 10}/live",
            "/queue?housekeeping=1", "/queue", "/queue?status=failed", "/queue?status=pending",
            "/queue?type=bench.mail.execute", "/queue?task=bench-sync",
            "/queue?task=bench-sync&status=failed", f"/queue?parent={mid - (mid - 1) % 10}",
            "/queue?title=target%20999", f"/queue?before={mid}", f"/queue?after={mid}",
            f"/jobs/{mid}", f"/jobs/{mid}?tab=results", "/workers", "/api/workers", "/flow",
            "/failed",
            "/failed?type=bench.sync.execute", f"/failed?group={mid - mid % 100 + 92}",
            "/api/jobs?status=completed", "/api/tasks", "/metrics", "/health"]


def register_bench_types(registry) -> None:
    """Register the bench rows' types, so the task filter and Results tab know them."""
    from cronjobs import CronJobHandler

    for job_type in ("bench.sync.discover", "bench.sync.execute", "bench.mail.execute"):
        cls = type(job_type.replace(".", "_"), (CronJobHandler,),
                   {"TYPE": job_type, "handle": lambda self, payload, job: True})
        registry.register(job_type, cls, "bench")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    sys.path.insert(0, str(ROOT / "src"))
    from cronjobs.app import App
    from cronjobs.config import Settings
    from cronjobs.migrate import upgrade
    from cronjobs.web import create_app

    keep = os.environ.get("BENCH_KEEP_DB")  # reuse (or create and keep) this database
    name = keep or "cjbench_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(MARIADB + "/test", poolclass=sa.pool.NullPool)
    with admin.begin() as conn:
        exists = conn.exec_driver_sql(f"SHOW DATABASES LIKE '{name}'").first() is not None
        if not exists:
            conn.exec_driver_sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    try:
        settings = Settings(database_url=f"{MARIADB}/{name}?charset=utf8mb4",
                            dashboard_token="bench-token")
        app = App(settings)
        register_bench_types(app.handlers)
        upgrade(app.engine)
        if not exists:
            print(f"filled {n:,} rows with one INSERT ... SELECT in {fill(app.engine, n):.1f} s")
        web = create_app(app)
        # every Overview request reads its numbers again (the page itself keeps a snapshot
        # for 3 s, which would make the repeats free); finished hours are read once
        web.config["CRONJOBS_OVERVIEW_CACHE_SECONDS"] = 0
        client = web.test_client()
        headers = {"Authorization": "Bearer bench-token"}
        worst = 0.0
        for path in pages(n):
            started = time.perf_counter()
            client.get(path, headers=headers)  # the first (cold) request: compiles templates
            cold = (time.perf_counter() - started) * 1000
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                resp = client.get(path, headers=headers)
                times.append((time.perf_counter() - started) * 1000)
                assert resp.status_code in (200, 503), (path, resp.status_code)
            p95 = statistics.quantiles(times, n=20)[18] if len(times) >= 2 else times[0]
            worst = max(worst, p95)
            print(f"{path:45s} p50 {statistics.median(times):7.1f} ms   p95 {p95:7.1f} ms"
                  f"   first {cold:7.1f} ms")
        load = os.getloadavg()[0]
        print(f"slowest page p95: {worst:.1f} ms (target: under 300 ms); load average "
              f"{load:.1f} on {os.cpu_count()} cores (other processes slow every figure)")
        app.close()
    finally:
        if not keep:
            with admin.begin() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        admin.dispose()


if __name__ == "__main__":
    main()
