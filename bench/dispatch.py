"""Dispatch: keyed `dispatch` one by one, 8 processes racing on shared keys, and
`dispatch_many` in batches of 1,000, against a raw single-row INSERT loop, on MariaDB,
PostgreSQL and SQLite (broker: Redis, as in production).

Baseline (same run, same database): the driver's own cursor inserting the same rows
(same columns, a unique key each) one row per commit, with no validation, no broker
message. Keyed dispatch: the public `dispatch(..., idempotency_key=...)` with a new key
each call (insert, commit, send). Race: 8 processes each dispatch the same `--keys` keys
in their own order; the figure is calls/s over all of them, and the run checks that one
row per key exists and that every racer got that row's id. `dispatch_many`: rows/s.

Each single-process loop stops after `--max-seconds` (the rate is what it did by then).
Targets: keyed dispatch >= 0.8 x the raw INSERT rate on MariaDB and PostgreSQL, >= 0.5 x on
SQLite (its raw loop has no network round trip to hide Python's work behind);
dispatch_many >= 15,000 rows/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime

from . import procs, report, stores
from .stores import NOOP

KEYED_TARGET = {"mariadb": 0.8, "postgresql": 0.8, "sqlite": 0.5}  # x the raw INSERT loop


def raw_insert_rate(app, n: int, max_seconds: float = 1e9) -> float:
    """Rows/s of single-row INSERT + COMMIT with the driver's cursor (at most `n` rows or
    `max_seconds` s)."""
    backend = app.engine.dialect.name
    mark = "?" if backend == "sqlite" else "%s"
    sql = ("INSERT INTO cronjob_queue (type, queue, status, priority, payload, attempts, "
           "max_attempts, idempotency_key, created_at, updated_at) "
           f"VALUES ({', '.join([mark] * 10)})")
    now = datetime.now(UTC).replace(tzinfo=None)
    raw = app.engine.raw_connection()
    try:
        cur = raw.cursor()
        start = time.perf_counter()
        end = start + max_seconds
        for i in range(n):
            cur.execute(sql, (NOOP, "default", "pending", 5, json.dumps({"i": i}), 0, 3,
                              f"raw-{i}", now, now))
            raw.commit()
            if time.perf_counter() > end:
                break
        seconds = time.perf_counter() - start
        cur.close()
    finally:
        raw.close()
    return (i + 1) / seconds


def keyed_rate(app, n: int, max_seconds: float = 1e9) -> float:
    """Calls/s of keyed `dispatch` one by one, a new key each (at most `n` calls or
    `max_seconds` s)."""
    from cronjobs import queue

    start = time.perf_counter()
    end = start + max_seconds
    for i in range(n):
        queue.dispatch(NOOP, {"i": i}, idempotency_key=f"keyed-{i}", app=app)
        if time.perf_counter() > end:
            break
    return (i + 1) / (time.perf_counter() - start)


def race_rate(url: str, ns: str, racers: int, keys: int) -> tuple[float, str]:
    """Calls/s of `racers` processes dispatching the same `keys` keys; plus a check."""
    import sqlalchemy as sa

    from cronjobs.store.models import cronjob_queue as q

    start_at = time.time() + 3 + racers * 0.5  # time to import and connect
    running = procs.Procs(procs.Proc([sys.executable, "-m", "bench.racer", url, ns, "race",
                                      str(keys), str(seed), str(start_at)], f"racer {seed}")
                          for seed in range(racers))
    with running:
        outs = [p.json_result(timeout_seconds=300) for p in running]
    calls = sum(o["calls"] for o in outs)
    seconds = max(o["end"] for o in outs) - min(o["start"] for o in outs)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = dict(conn.execute(sa.select(q.c.idempotency_key, q.c.id)
                                 .where(q.c.idempotency_key.like("race-%"))).all())
    engine.dispose()
    agree = all(o["ids"] == rows for o in outs)
    check = (f"{len(rows)} rows for {keys} keys; every racer got the row's id: "
             f"{'yes' if agree else 'NO'}")
    return calls / seconds, check


def many_rate(app, batches: int, max_seconds: float = 1e9) -> float:
    """Rows/s of `dispatch_many` in batches of 1,000, no keys (at most `batches` batches
    or `max_seconds` s)."""
    start = time.perf_counter()
    end = start + max_seconds
    done = 0
    for _ in range(batches):
        stores.dispatch_rows(app, 1000)
        done += 1
        if time.perf_counter() > end:
            break
    return done * 1000 / (time.perf_counter() - start)


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Every measurement on every backend."""
    from cronjobs.app import use

    n = 100 if args.quick else args.calls
    keys = 30 if args.quick else args.keys
    racers = 2 if args.quick else args.racers
    batches = 1 if args.quick else args.batches
    cap = args.max_seconds
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    results.params = {"calls": n, "race_keys": keys, "racers": racers, "many_batches": batches,
                      "max_seconds_per_loop": cap, "backends": backends, "broker": "redis"}
    for backend in backends:
        with stores.database(backend) as url, stores.redis_namespace() as ns:
            app = stores.make_app(url, ns)
            stores.dispatch_rows(app, 50)  # warm up: connections, imports
            raw = raw_insert_rate(app, n, cap)
            keyed = keyed_rate(app, n, cap)
            many = many_rate(app, batches, cap)
            race, check = race_rate(url, ns, racers, keys)
            app.close()
            use(None)
        base = f"raw INSERT loop {backend}"
        results.add(f"keyed dispatch {backend}", keyed, "calls/s", baseline=raw,
                    baseline_name=base, target=(">=", KEYED_TARGET[backend], "ratio"))
        results.add(f"{racers} processes racing on {keys} keys {backend}", race, "calls/s",
                    baseline=raw, baseline_name=base, note=check)
        results.add(f"dispatch_many x1000 {backend}", many, "rows/s", baseline=raw,
                    baseline_name=base, target=(">=", 15000, "value"))


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--calls", type=int, default=2000, help="keyed dispatches (%(default)s)")
    parser.add_argument("--keys", type=int, default=100, help="shared keys in the race")
    parser.add_argument("--racers", type=int, default=8, help="racing processes (%(default)s)")
    parser.add_argument("--batches", type=int, default=10, help="dispatch_many batches of 1,000")
    parser.add_argument("--max-seconds", type=float, default=4,
                        help="longest time of each single-process loop, s (%(default)s)")
    parser.add_argument("--backends", default="mariadb,postgresql,sqlite",
                        help="comma-separated (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("dispatch", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
