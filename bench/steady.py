"""Steady state: dispatch and drain at the same time, cronjobs 2x8 against Celery prefork 2.

A producer process keeps up to `--backlog` jobs waiting (cronjobs: `dispatch_many` in
batches of 100; Celery: `send_task` one by one) while the worker drains. After the first
completion and a warm-up of `--warmup` seconds, completions are counted over
`--seconds` (cronjobs) and `--celery-seconds` (Celery) on MariaDB + Redis.

Target: cronjobs >= 1.0 x Celery prefork 2 (same run).
"""

from __future__ import annotations

import argparse
import time

import redis

from . import celery_app, procs, report, stores
from .stores import REDIS


def _window(count: callable, running: procs.Procs, warmup: float, seconds: float) -> float:
    procs.wait_for(count, 1, running, max_seconds=0)
    time.sleep(warmup)
    running.check()
    c0, t0 = count(), time.monotonic()
    time.sleep(seconds)
    running.check()
    return (count() - c0) / (time.monotonic() - t0)


def cronjobs_rate(processes: int, threads: int, seconds: float, warmup: float,
                  backlog: int) -> tuple[float, dict]:
    """Completed jobs/s of `cronjobs worker` processes x threads with a producer running."""
    from cronjobs.app import use

    with stores.database("mariadb") as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        total = seconds + warmup + 120
        with procs.Procs([procs.producer("cronjobs", url, ns, total, backlog, 100)]) as prod, \
                procs.cronjobs_worker(stores.worker_env(url, ns), threads, processes) as running:
            running.extend(prod)
            rate = _window(lambda: stores.count_rows(app.engine, "completed"), running, warmup,
                           seconds)
            prod[0].popen.terminate()
            produced = prod[0].json_result()
        app.close()
        use(None)
    return rate, produced


def celery_rate(concurrency: int, seconds: float, warmup: float,
                backlog: int) -> tuple[float, dict]:
    """Completed jobs/s of a Celery prefork worker with a producer running."""
    with stores.redis_namespace() as ns:
        client = redis.Redis.from_url(REDIS)
        queue, unacked = celery_app.queue_keys(ns)

        def done() -> int:
            sent = int(client.get(f"{ns}:bench-sent") or 0)
            return sent - client.llen(queue) - client.hlen(unacked) if sent else 0

        total = seconds + warmup + 120
        with procs.Procs([procs.producer("celery", ns, total, backlog)]) as prod, \
                procs.celery_worker(ns, concurrency) as running:
            running.extend(prod)
            rate = _window(done, running, warmup, seconds)
            prod[0].popen.terminate()
            produced = prod[0].json_result()
        client.close()
    return rate, produced


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Measure Celery, then cronjobs, and add the figure."""
    seconds = 2 if args.quick else args.seconds
    celery_seconds = 2 if args.quick else args.celery_seconds
    warmup = 0.5 if args.quick else args.warmup
    processes, threads = (1, 2) if args.quick else (2, 8)
    results.params = {"seconds": seconds, "celery_seconds": celery_seconds, "warmup": warmup,
                      "backlog": args.backlog, "cronjobs": f"{processes}x{threads}",
                      "celery": "prefork 2"}
    celery, celery_prod = celery_rate(2, celery_seconds, warmup, args.backlog)
    ours, prod = cronjobs_rate(processes, threads, seconds, warmup, args.backlog)
    results.add(f"steady no-op {processes}x{threads} mariadb", ours, "jobs/s", baseline=celery,
                baseline_name="celery prefork 2", target=(">=", 1.0, "ratio"),
                note=f"producer sent {prod['sent']} (celery's {celery_prod['sent']})")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--seconds", type=float, default=30,
                        help="cronjobs window, s (%(default)s)")
    parser.add_argument("--celery-seconds", type=float, default=15,
                        help="Celery window, s (%(default)s)")
    parser.add_argument("--warmup", type=float, default=3, help="s after the first completion")
    parser.add_argument("--backlog", type=int, default=2000, help="jobs kept waiting (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("steady", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
