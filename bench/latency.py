"""Latency: dispatches at a steady 100/s to a live `cronjobs worker` (1x8, MariaDB + Redis).

`--jobs` keyed-free no-op jobs are dispatched one by one at `--rate` per second from this
process. From each row: dispatch -> start is `started_at - created_at` (the claim; the
job process gets the row a fraction of a ms later) and dispatch -> completed is
`finished_at - created_at`. Then the worker idles `--idle` seconds and 5 more jobs are
dispatched 2 s apart; the slowest of them is the "after idle" figure.

Baseline (same run): bare Dramatiq 1x8 on the same Redis, `--baseline-jobs` messages at
the same rate, dispatch -> start measured in the actor. Targets: p50 <= 25 ms, p99 <= 250 ms, after
idle <= 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import time

from . import procs, report, stores
from .stores import NOOP, REDIS


def percentile(values: list[float], p: float) -> float:
    """The `p`-th percentile (0-100) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def paced(n: int, rate: float, fn) -> None:
    """Call `fn(i)` `n` times at `rate` per second (no drift: each call has its slot)."""
    start = time.monotonic()
    for i in range(n):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        fn(i)


def _rows(app, ids: list[int]) -> list[dict]:
    from sqlalchemy import select

    from cronjobs.store.models import cronjob_queue as q

    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            select(q.c.id, q.c.created_at, q.c.started_at, q.c.finished_at)
            .where(q.c.id.in_(ids))).mappings()]


def _ms(a, b) -> float:
    return (b - a).total_seconds() * 1000


def cronjobs_latency(n: int, rate: float, idle: float, samples: int = 5, gap: float = 2,
                     max_wait: float = 30) -> dict:
    """Run the scenario on cronjobs; returns lists of ms.

    A job not finished `max_wait` s after the last dispatch (a worker slower than the
    rate) counts with its latency so far (a lower bound); `late` says how many.
    """
    from cronjobs import queue
    from cronjobs.app import use

    with stores.database("mariadb") as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        with procs.cronjobs_worker(stores.worker_env(url, ns), 8, 1) as running:
            warm = stores.dispatch_rows(app, 20)  # also waits for the job processes
            procs.wait_for(lambda: stores.count_rows(app.engine, "completed"), len(warm), running,
                           max_seconds=60)
            first = max(warm)
            ids: list[int] = []
            paced(n, rate, lambda i: ids.append(queue.dispatch(NOOP, {"i": i}, app=app)))
            procs.wait_for(lambda: stores.count_rows(app.engine, "completed", first), n, running,
                           max_seconds=max_wait)
            time.sleep(idle)
            idle_ids = []
            for _ in range(samples):
                idle_ids.append(queue.dispatch(NOOP, {"idle": True}, app=app))
                time.sleep(gap)
            procs.wait_for(lambda: stores.count_rows(app.engine, "completed", max(ids)), samples,
                           running, max_seconds=30)
        read_at = app.clock.now()
        rows, idle_rows = _rows(app, ids), _rows(app, idle_ids)
        app.close()
        use(None)

    def ms(row: dict, column: str) -> float:
        return _ms(row["created_at"], row[column] or read_at)

    return {"start": [ms(r, "started_at") for r in rows],
            "done": [ms(r, "finished_at") for r in rows],
            "idle_start": [ms(r, "started_at") for r in idle_rows],
            "late": sum(r["finished_at"] is None for r in rows)}


def dramatiq_latency(n: int, rate: float) -> list[float]:
    """dispatch -> start in ms for a bare Dramatiq 1x8 worker at the same rate."""
    import redis
    from dramatiq.brokers.redis import RedisBroker

    from .bare_dramatiq import declare

    with stores.redis_namespace() as ns:
        broker = RedisBroker(url=REDIS, namespace=ns, middleware=[])
        send = declare(broker)["stamp"].send
        client = redis.Redis.from_url(REDIS)
        with procs.bare_dramatiq(ns, 8, 1) as running:
            for i in range(20):
                send(f"warm{i}", time.time())
            procs.wait_for(lambda: client.hlen(f"{ns}:bench-stamps"), 20, running, max_seconds=60)
            paced(n, rate, lambda i: send(str(i), time.time()))
            procs.wait_for(lambda: client.hlen(f"{ns}:bench-stamps") - 20, n, running,
                           max_seconds=60)
        stamps = {k.decode(): float(v) for k, v in client.hgetall(f"{ns}:bench-stamps").items()}
        client.close()
        broker.close()
    return [v * 1000 for k, v in stamps.items() if not k.startswith("warm")]


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Measure the baseline and cronjobs; add p50/p95/p99 figures."""
    n = 50 if args.quick else args.jobs
    idle = 1 if args.quick else args.idle
    samples, gap = (2, 0.5) if args.quick else (5, 2.0)
    results.params = {"jobs": n, "rate_per_s": args.rate, "idle_s": idle, "worker": "1x8",
                      "baseline_jobs": min(n, args.baseline_jobs)}
    base = dramatiq_latency(min(n, args.baseline_jobs), args.rate)
    ours = cronjobs_latency(n, args.rate, idle, samples, gap)
    targets = {50: 25, 99: 250}
    for p in (50, 95, 99):
        results.add(f"dispatch->start p{p}", percentile(ours["start"], p), "ms",
                    baseline=percentile(base, p), baseline_name="bare dramatiq 1x8",
                    target=("<=", targets[p], "value") if p in targets else None)
    late = (f"{ours['late']} of {n} not finished by the end of the wait (counted up to then)"
            if ours["late"] else "")
    for p in (50, 95, 99):
        results.add(f"dispatch->completed p{p}", percentile(ours["done"], p), "ms",
                    baseline=percentile(base, p), baseline_name="bare dramatiq 1x8 start",
                    note=late)
    results.add(f"dispatch->start after {idle:g} s idle (max of {samples})",
                max(ours["idle_start"]), "ms", target=("<=", 1000, "value"),
                note="each: " + ", ".join(f"{v:.0f}" for v in ours["idle_start"]) + " ms; "
                f"median of the steady run {statistics.median(ours['start']):.1f} ms")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--jobs", type=int, default=1000, help="jobs dispatched (%(default)s)")
    parser.add_argument("--rate", type=float, default=100, help="dispatches per s (%(default)s)")
    parser.add_argument("--baseline-jobs", type=int, default=500,
                        help="jobs of the bare Dramatiq baseline (%(default)s)")
    parser.add_argument("--idle", type=float, default=30, help="idle pause, s (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("latency", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
