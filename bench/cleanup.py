"""Cleanup: 1,000,000 finished rows past retention deleted by `cronjobs.queue.cleanup()`
(MariaDB), with a dispatch loop running at the same time.

The rows (`completed`, finished 30 days ago) are inserted with one INSERT ... SELECT from
MariaDB's sequence engine. Then a loop process calls keyed `dispatch` one by one for
`--baseline-seconds` (the baseline: its p99 with no cleanup running), and again while
`cleanup()` runs in a child process that times every SQL statement. The child stops
after `--max-seconds` (the cap: the note says how far it got).

Targets: total <= 120 s, no statement over 1 s, dispatch p99 during cleanup <= 50 ms.
"""

from __future__ import annotations

import argparse
import multiprocessing
import threading
import time

import sqlalchemy as sa

from . import procs, report, stores
from .latency import percentile
from .stores import NOOP


def fill(url: str, rows: int, days_ago: int = 30) -> None:
    """Insert `rows` completed rows finished `days_ago` days ago (MariaDB only)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        for start in range(0, rows, 250_000):
            size = min(250_000, rows - start)
            conn.exec_driver_sql(
                "INSERT INTO cronjob_queue (type, queue, status, priority, payload, attempts, "
                "max_attempts, created_at, updated_at, started_at, finished_at) "
                f"SELECT '{NOOP}', 'default', 'completed', 5, '{{}}', 1, 3, t, t, t, t FROM "
                f"(SELECT UTC_TIMESTAMP(6) - INTERVAL {days_ago} DAY - INTERVAL seq SECOND AS t "
                f"FROM seq_1_to_{size}) s")
    engine.dispose()


def _child(url: str, ns: str, cap: float, out: multiprocessing.Queue) -> None:
    """Run cleanup() timing every statement; put the stats on `out` (after `cap` s at most)."""
    from cronjobs import queue

    app = stores.make_app(url, ns)
    stats = {"statements": 0, "longest_ms": 0.0, "longest_sql": "", "counts": None,
             "finished": False}

    @sa.event.listens_for(app.engine, "before_cursor_execute")
    def _before(conn, cursor, statement, params, context, many):
        conn.info["bench_t"] = time.perf_counter()

    @sa.event.listens_for(app.engine, "after_cursor_execute")
    def _after(conn, cursor, statement, params, context, many):
        ms = (time.perf_counter() - conn.info.pop("bench_t")) * 1000
        stats["statements"] += 1
        if ms > stats["longest_ms"]:
            stats["longest_ms"], stats["longest_sql"] = ms, " ".join(statement.split())[:120]

    def work() -> None:
        stats["counts"] = queue.cleanup(app=app)
        stats["finished"] = True

    start = time.perf_counter()
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(cap)
    stats["seconds"] = time.perf_counter() - start
    out.put(dict(stats))
    time.sleep(0.5)  # let the queue's feeder thread flush before the hard exit
    import os

    os._exit(0)


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Fill, measure the baseline loop, run cleanup with the loop, add the figures."""
    rows = 5_000 if args.quick else args.rows
    cap = 20 if args.quick else args.max_seconds
    base_seconds = 1 if args.quick else args.baseline_seconds
    results.params = {"rows": rows, "max_seconds": cap, "baseline_seconds": base_seconds,
                      "retention_completed_days": 7, "batch": 1000}
    with stores.database("mariadb") as url, stores.redis_namespace() as ns:
        start = time.perf_counter()
        fill(url, rows)
        fill_s = time.perf_counter() - start
        loop = procs.producer("loop", url, ns, base_seconds)
        before = loop.json_result(timeout_seconds=base_seconds + 60)["latencies_ms"]
        loop.stop()
        loop = procs.producer("loop", url, ns, cap + 60)
        time.sleep(1 if args.quick else 3)  # the loop is dispatching before cleanup starts
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        child = ctx.Process(target=_child, args=(url, ns, cap, out))
        child.start()
        stats = out.get(timeout=cap + 120)
        child.join(30)
        loop.popen.terminate()
        during = loop.json_result()["latencies_ms"]
        loop.stop()
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        left = stores.count_rows(engine, "completed")  # the loop's rows stay pending
        engine.dispose()
    deleted = rows - left
    note = (f"{deleted} of {rows} rows deleted" + ("" if stats["finished"] else
            f" (capped at {cap:g} s)") + f"; fill took {fill_s:.0f} s")
    results.add(f"cleanup of {rows} rows", stats["seconds"] if stats["finished"] else None, "s",
                target=("<=", 120, "value"), note=note)
    results.add("longest cleanup statement", stats["longest_ms"], "ms",
                target=("<=", 1000, "value"),
                note=f"{stats['statements']} statements; longest: {stats['longest_sql']}")
    results.add("keyed dispatch p99 during cleanup", percentile(during, 99), "ms",
                baseline=percentile(before, 99), baseline_name="p99 without cleanup",
                target=("<=", 50, "value"),
                note=f"{len(during)} dispatches during, {len(before)} before")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--rows", type=int, default=1_000_000, help="finished rows (%(default)s)")
    parser.add_argument("--max-seconds", type=float, default=120,
                        help="stop cleanup after this many s (%(default)s)")
    parser.add_argument("--baseline-seconds", type=float, default=5,
                        help="dispatch loop without cleanup, s (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("cleanup", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
