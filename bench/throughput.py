"""Throughput: pre-dispatched no-op rows drained by `cronjobs worker`, against bare
Dramatiq and Celery on the same Redis, all measured in this run.

- `cronjobs worker` at 1x8 and 2x8 (processes x threads) on MariaDB + Redis, and 2x8 on
  PostgreSQL and SQLite; bare Dramatiq at 1x8 and 2x8; Celery prefork 2.
- The same with 10 ms sleep jobs (I/O-bound, `--sleep-rows`): cronjobs 2x8 against bare
  Dramatiq 2x8.
- Start-up: seconds from starting the 2x8 worker to its first completed job (imports, job
  processes), against bare Dramatiq 2x8 (Celery's in the note).

Each run fills a fresh queue with `--rows` jobs, starts the worker and measures from the
first completion until the queue is empty or `--max-seconds` have passed (the cap keeps a
slow system within the suite's budget; the note says when it was hit). cronjobs rates
come from the rows' `finished_at` (first and last 2 % dropped); baselines from polling
Redis every 50 ms.

Targets: 2x8 on MariaDB >= 1.0 x Celery prefork 2 and >= 0.6 x bare Dramatiq 2x8.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import redis
import sqlalchemy as sa

from . import celery_app, procs, report, stores
from .bare_dramatiq import declare
from .stores import NOOP, REDIS, SLEEP


def bare_drain(n: int, threads: int, processes: int, actor: str, cap: float) -> procs.Drain:
    """Drain `n` messages for the bare Dramatiq `actor` with processes x threads."""
    from dramatiq.brokers.redis import RedisBroker

    with stores.redis_namespace() as ns:
        broker = RedisBroker(url=REDIS, namespace=ns, middleware=[])
        send = declare(broker)[actor].send
        for i in range(n):
            send(i)
        broker.close()
        client = redis.Redis.from_url(REDIS)
        with procs.bare_dramatiq(ns, threads, processes) as running:
            drain = procs.wait_for(lambda: n - client.hlen(f"{ns}:default.msgs"), n, running,
                                   max_seconds=cap)
        client.close()
    return drain


def celery_drain(n: int, concurrency: int, cap: float) -> procs.Drain:
    """Drain `n` no-op messages with a Celery prefork worker of `concurrency`."""
    with stores.redis_namespace() as ns:
        celery_app.push(ns, n)
        client = redis.Redis.from_url(REDIS)
        queue, unacked = celery_app.queue_keys(ns)
        with procs.celery_worker(ns, concurrency) as running:
            drain = procs.wait_for(lambda: n - client.llen(queue) - client.hlen(unacked), n,
                                   running, max_seconds=cap)
        client.close()
    return drain


def cronjobs_drain(backend: str, n: int, processes: int, threads: int, job_type: str,
                   cap: float, prefetch: int | None = None,
                   dispatch: Callable[[object], None] | None = None,
                   worker: Callable[[dict], procs.Procs] | None = None
                   ) -> tuple[float, procs.Drain]:
    """Drain `n` pre-dispatched rows of `job_type` with `cronjobs worker`.

    Args:
        dispatch: called with the App to put the `n` rows in the queue before the worker
            starts; by default `n` rows of `job_type` with an empty payload.
        worker: starts the worker from its environment; by default `cronjobs worker
            --processes <processes> --slots <threads>`.

    Returns:
        `(rate from finished_at in jobs/s, the polled Drain)`.
    """
    from cronjobs.app import use

    with stores.database(backend) as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        if dispatch is None:
            stores.dispatch_rows(app, n, job_type)
        else:
            dispatch(app)
        env = stores.worker_env(url, ns)
        with (worker(env) if worker else procs.cronjobs_worker(env, threads, processes,
                                                               prefetch)) as running:
            drain = procs.wait_for(lambda: stores.count_rows(app.engine, "completed"), n,
                                   running, max_seconds=cap, poll_seconds=0.25)
        from cronjobs.store.models import cronjob_queue as q

        with app.engine.connect() as conn:
            times = conn.execute(sa.select(q.c.finished_at)
                                 .where(q.c.status == "completed")).scalars().all()
        app.close()
        use(None)
    return procs.rate_from_times(times), drain


def _note(drain: procs.Drain, n: int) -> str:
    if drain.complete:
        return f"{n} rows drained"
    return f"capped: {drain.done} of {n} done in {drain.seconds:.0f} s"


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Measure the baselines, then every cronjobs configuration, and add the figures."""
    n = 100 if args.quick else args.rows
    threads = 2 if args.quick else args.threads
    cap = 3 if args.quick else args.max_seconds
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    results.params = {"rows": n, "sleep_rows": args.sleep_rows, "threads": threads,
                      "max_seconds": cap, "backends": backends,
                      "prefetch": args.prefetch or "default (= threads)", "celery": "prefork 2",
                      "sleep_ms": 10}
    one, two = f"1x{threads}", f"2x{threads}"
    full = not args.quick  # --quick: only 2xN no-op (a smoke run of the code paths)
    startup: dict[str, float] = {}
    bare1 = bare_drain(n, threads, 1, "noop", cap) if full else None
    bare2 = bare_drain(n, threads, 2, "noop", cap)
    celery = celery_drain(n, 2, cap)
    for backend in backends:
        configs = [(1, one), (2, two)] if backend == "mariadb" and full else [(2, two)]
        for processes, label in configs:
            rate, drain = cronjobs_drain(backend, n, processes, threads, NOOP, cap, args.prefetch)
            if backend == backends[0]:
                startup[label] = drain.startup_seconds
            name = f"drain no-op {label} {backend}"
            base = bare1 if processes == 1 else bare2
            headline = backend == "mariadb" and processes == 2
            results.add(name, rate, "jobs/s", baseline=base.rate,
                        baseline_name=f"bare dramatiq {label}", note=_note(drain, n),
                        target=(">=", 0.6, "ratio") if headline else None)
            if processes == 2:
                results.add(name, rate, "jobs/s", baseline=celery.rate,
                            baseline_name="celery prefork 2", note=_note(celery, n),
                            target=(">=", 1.0, "ratio") if headline else None)
    if "mariadb" in backends and full:
        k = args.sleep_rows
        bare_sleep = bare_drain(k, threads, 2, "sleep", cap)
        rate, drain = cronjobs_drain("mariadb", k, 2, threads, SLEEP, cap, args.prefetch)
        results.add(f"drain 10 ms sleep {two} mariadb", rate, "jobs/s", baseline=bare_sleep.rate,
                    baseline_name=f"bare dramatiq {two} sleep", note=_note(drain, k))
    results.add(f"start-up {two} to first completion", startup[two], "s",
                baseline=bare2.startup_seconds, baseline_name=f"bare dramatiq {two}",
                note=f"celery prefork 2: {celery.startup_seconds:.1f} s")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--rows", type=int, default=20_000, help="jobs per drain (%(default)s)")
    parser.add_argument("--threads", type=int, default=8, help="threads per process (%(default)s)")
    parser.add_argument("--sleep-rows", type=int, default=5_000,
                        help="jobs of the 10 ms sleep drains (%(default)s)")
    parser.add_argument("--max-seconds", type=float, default=9,
                        help="longest measuring window per drain, s (%(default)s)")
    parser.add_argument("--backends", default="mariadb,postgresql,sqlite",
                        help="comma-separated (%(default)s)")
    parser.add_argument("--prefetch", type=int, default=None,
                        help="cronjobs worker --prefetch (default: the CLI's default)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("throughput", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
