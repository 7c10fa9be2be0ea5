"""Tick: one `tick()` over 1,000 registered tasks of mixed frequencies (MariaDB).

1,000 handler classes are registered in this process: 40 % every minute, 20 % hourly,
15 % daily, 10 % monthly, 15 % cron (`*/5 * * * *`, `0 * * * *`, `15 3 * * *`). The first
tick (at 2030-01-01 00:00 UTC, injected) creates every task's runtime row and starts
them all; the figure is the median of the next `--ticks` ticks, one minute apart, which
start the minute tasks and the due cron tasks and skip the rest.

Baseline (same run): as many raw single-row INSERT + COMMITs as that tick started jobs.
Target: <= 300 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime, timedelta

from . import report, stores
from .dispatch import raw_insert_rate

MIX = [("minute", 40), ("hour", 20), ("day", 15), ("month", 10), ("*/5 * * * *", 5),
       ("0 * * * *", 5), ("15 3 * * *", 5)]


def register_tasks(count: int) -> None:
    """Register `count` no-op handler classes named `bench.t<i>.execute`."""
    import registry
    from cronjobs import CronJobHandler

    frequencies = [f for f, share in MIX for _ in range(share)]
    for i in range(count):
        cls = type(f"Tick{i}", (CronJobHandler,), {
            "TYPE": f"bench.t{i}.execute", "FREQUENCY": frequencies[i % len(frequencies)],
            "handle": lambda self, payload, job: True})
        registry.register(cls.TYPE, cls, "bench.tick")


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Register the tasks, tick, and add the figures."""
    from cronjobs.app import use
    from cronjobs.schedule.scheduler import tick

    count = 50 if args.quick else args.tasks
    ticks = 2 if args.quick else args.ticks
    results.params = {"tasks": count, "mix": dict(MIX), "measured_ticks": ticks}
    with stores.database("mariadb") as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        register_tasks(count)
        at = datetime(2030, 1, 1, 0, 0)
        start = time.perf_counter()
        first = tick(at, app=app)
        first_ms = (time.perf_counter() - start) * 1000
        times, started = [], []
        for minute in range(1, ticks + 1):
            _complete_all(app)
            start = time.perf_counter()
            report_ = tick(at + timedelta(minutes=minute), app=app)
            times.append((time.perf_counter() - start) * 1000)
            started.append(len(report_.started))
        insert_ms = 1000 / raw_insert_rate(app, 200)
        app.close()
        use(None)
    median = statistics.median(times)
    jobs = statistics.median(started)
    results.add(f"tick over {count} tasks (median of {ticks})", median, "ms",
                baseline=insert_ms * jobs, baseline_name=f"{jobs:g} raw INSERT+COMMIT",
                target=("<=", 300, "value"), note="each: " + ", ".join(f"{t:.0f}" for t in times)
                + f" ms; jobs started: {started}")
    results.add(f"first tick over {count} tasks (creates runtime rows)", first_ms, "ms",
                baseline=insert_ms * len(first.started),
                baseline_name=f"{len(first.started)} raw INSERT+COMMIT")


def _complete_all(app) -> None:
    """Mark every pending row completed (the runs of the last tick ended)."""
    with app.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE cronjob_queue SET status = 'completed' "
                             "WHERE status = 'pending'")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--tasks", type=int, default=1000, help="registered tasks (%(default)s)")
    parser.add_argument("--ticks", type=int, default=3, help="measured ticks (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("tick", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
