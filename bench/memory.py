"""Memory: RSS and PSS of the whole process tree of a worker with 8 slots, idle, busy and
after `--jobs` no-op jobs, against bare Dramatiq 1x8 and Celery prefork 8 (same run, same
Redis).

Idle: after one warm-up job and `--settle` seconds. Busy: the largest of a few samples
taken while jobs are fed. After: jobs are fed (at most 3,000 waiting) until `--jobs` have
run or the feeding time is up (`--ours-max-seconds` for cronjobs, enough for the 50,000 of
the target at ~800 jobs/s; `--max-seconds` for each baseline), then `--settle` seconds
(for cronjobs: until its job processes have ended, at most 10 x `--settle`); the note
gives how many ran. The cronjobs worker runs with
`CRONJOBS_JOB_PROCESS_IDLE_SECONDS` at a quarter of `--settle` (default 60 s), so its idle
and after figures are those of a worker whose job processes and fork server have retired;
growth compares the two. PSS shares each page among the processes mapping it, so the sum
over the tree is what the worker really costs; RSS counts shared pages once per process.

Targets: cronjobs PSS <= Celery prefork 8's, idle and after; idle <= 60 MB, busy <= 120 MB;
growth <= 10 %.
"""

from __future__ import annotations

import argparse
import time

import redis

from . import celery_app, procs, report, stores
from .stores import REDIS


def _feed(total: int, cap: float, waiting, add, done, running: procs.Procs,
          busy: list | None = None) -> int:
    """Add jobs (`add(k)`) while fewer than 3,000 wait, until `done() >= total` or `cap` s;
    appends a `procs.tree_memory` sample of the first process to `busy` after each of the
    first 5 batches past the first 3."""
    sent, batches, end = 0, 0, time.monotonic() + cap
    while time.monotonic() < end and done() < total:
        running.check()
        if sent < total and waiting() < 3000:
            k = min(1000, total - sent)
            add(k)
            sent += k
            batches += 1
            if busy is not None and 3 <= batches < 8:
                busy.append(procs.tree_memory([running[0].pid]))
        else:
            time.sleep(0.05)
    return done()


def measure_cronjobs(total: int, cap: float, settle: float,
                     slots: int = 8) -> tuple[dict, dict, int, dict]:
    """(idle, after, jobs run, busy) for `cronjobs worker --slots 8` on MariaDB + Redis."""
    from cronjobs.app import use

    with stores.database("mariadb") as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        env = stores.worker_env(url, ns, CRONJOBS_JOB_PROCESS_IDLE_SECONDS=f"{settle / 4:g}")
        busy: list[dict] = []
        with procs.cronjobs_worker(env, slots, 1) as running:
            stores.dispatch_rows(app, 1)
            procs.wait_for(lambda: stores.count_rows(app.engine, "completed"), 1, running,
                           max_seconds=0)
            time.sleep(settle)
            idle = procs.tree_memory([running[0].pid])
            ran = _feed(total, cap, lambda: stores.count_rows(app.engine, "pending"),
                        lambda k: stores.dispatch_rows(app, k),
                        lambda: stores.count_rows(app.engine, "completed") - 1, running, busy)
            time.sleep(settle)
            after = procs.tree_memory([running[0].pid])
            give_up = time.monotonic() + 10 * settle  # the job processes end, then measure
            while after["processes"] > idle["processes"] and time.monotonic() < give_up:
                time.sleep(0.1)
                after = procs.tree_memory([running[0].pid])
        app.close()
        use(None)
    return idle, after, ran, max(busy, key=lambda m: m["pss_mb"], default=after)


def measure_dramatiq(total: int, cap: float, settle: float,
                     slots: int = 8) -> tuple[dict, dict, int]:
    """(idle, after, jobs run) for bare Dramatiq 1x8."""
    from dramatiq.brokers.redis import RedisBroker

    from .bare_dramatiq import declare

    with stores.redis_namespace() as ns:
        broker = RedisBroker(url=REDIS, namespace=ns, middleware=[])
        send = declare(broker)["noop"].send
        client = redis.Redis.from_url(REDIS)
        sent = [0]

        def add(k: int) -> None:
            for i in range(k):
                send(i)
            sent[0] += k

        with procs.bare_dramatiq(ns, slots, 1) as running:
            add(1)
            procs.wait_for(lambda: sent[0] - client.hlen(f"{ns}:default.msgs"), 1, running,
                           max_seconds=0)
            time.sleep(settle)
            idle = procs.tree_memory([running[0].pid])
            ran = _feed(total, cap, lambda: client.hlen(f"{ns}:default.msgs"), add,
                        lambda: sent[0] - client.hlen(f"{ns}:default.msgs") - 1, running)
            after = procs.tree_memory([running[0].pid])
        client.close()
        broker.close()
    return idle, after, ran


def measure_celery(total: int, cap: float, settle: float, slots: int = 8) -> tuple[dict, dict, int]:
    """(idle, after, jobs run) for Celery prefork 8."""
    with stores.redis_namespace() as ns:
        client = redis.Redis.from_url(REDIS)
        queue, unacked = celery_app.queue_keys(ns)
        sent = [0]

        def add(k: int) -> None:
            celery_app.push(ns, k)
            sent[0] += k

        def waiting() -> int:
            return client.llen(queue) + client.hlen(unacked)

        with procs.celery_worker(ns, slots) as running:
            add(1)
            procs.wait_for(lambda: sent[0] - waiting(), 1, running, max_seconds=0)
            time.sleep(settle)
            idle = procs.tree_memory([running[0].pid])
            ran = _feed(total, cap, waiting, add, lambda: sent[0] - waiting() - 1, running)
            after = procs.tree_memory([running[0].pid])
        client.close()
    return idle, after, ran


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Measure the three workers and add the figures."""
    total = 200 if args.quick else args.jobs
    cap = 2 if args.quick else args.max_seconds
    ours_cap = 2 if args.quick else args.ours_max_seconds
    settle = 0.5 if args.quick else args.settle
    n = 2 if args.quick else 8  # slots
    results.params = {"jobs": total, "max_seconds": cap, "ours_max_seconds": ours_cap,
                      "settle_s": settle, "slots": n,
                      "cronjobs": f"1x{n}", "dramatiq": f"1x{n}", "celery": f"prefork {n}"}
    celery = measure_celery(total, cap, settle, n)
    bare = measure_dramatiq(total, cap, settle, n)
    ours = measure_cronjobs(total, ours_cap, settle, n)
    for i, when in ((0, "idle"), (1, "after jobs")):
        note = (f"{ours[i]['processes']} processes, RSS {ours[i]['rss_mb']:g} MB; celery "
                f"{celery[i]['processes']} processes, RSS {celery[i]['rss_mb']:g} MB")
        if i:
            note += f"; jobs run: cronjobs {ours[2]}, celery {celery[2]}, dramatiq {bare[2]}"
        results.add(f"worker PSS {n} slots, {when}", ours[i]["pss_mb"], "MB",
                    baseline=celery[i]["pss_mb"], baseline_name=f"celery prefork {n}",
                    target=("<=", 1.0, "ratio"), note=note)
        results.add(f"worker PSS {n} slots, {when}", ours[i]["pss_mb"], "MB",
                    baseline=bare[i]["pss_mb"], baseline_name=f"bare dramatiq 1x{n}",
                    note=f"dramatiq RSS {bare[i]['rss_mb']:g} MB")
    results.add(f"cronjobs PSS {n} slots, idle", ours[0]["pss_mb"], "MB",
                target=("<=", 60, "value"), note=f"{ours[0]['processes']} process(es)")
    results.add(f"cronjobs PSS {n} slots, busy", ours[3]["pss_mb"], "MB",
                target=("<=", 120, "value"), note=f"{ours[3]['processes']} processes, RSS "
                                                  f"{ours[3]['rss_mb']:g} MB")
    growth = (ours[1]["pss_mb"] / ours[0]["pss_mb"] - 1) * 100
    results.add(f"PSS growth over {ours[2]} jobs", growth, "%", target=("<=", 10, "value"),
                note=f"celery {(celery[1]['pss_mb'] / celery[0]['pss_mb'] - 1) * 100:.1f} % over "
                     f"{celery[2]} jobs")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs to run (%(default)s)")
    parser.add_argument("--max-seconds", type=float, default=12,
                        help="longest feeding time per baseline worker, s (%(default)s)")
    parser.add_argument("--ours-max-seconds", type=float, default=80,
                        help="longest feeding time of the cronjobs worker, s (%(default)s)")
    parser.add_argument("--settle", type=float, default=3, help="idle wait before measuring, s")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("memory", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
