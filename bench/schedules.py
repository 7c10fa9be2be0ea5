"""Schedules: one `tick()` over 1,000 schedule entries (MariaDB).

Ten handlers, each with 100 entries: 50 in its `SCHEDULES` (code) and 50 stored at run
time (`cronjob_schedule`), cron lines `* * * * *`, `*/5 * * * *` and `0 9 * * *` in
three zones, each with a payload of its own. The first tick (2030-01-01 00:00 UTC,
injected) creates every entry's runtime row; the figure is the median of the next
`--ticks` ticks, one minute apart (the stored entries read in one statement per tick).

Baseline (same run): as many raw single-row INSERT + COMMITs as that tick started jobs.
Target: < 300 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime, timedelta

from . import report, stores
from .dispatch import raw_insert_rate
from .tick import _complete_all

CRONS = ["* * * * *", "*/5 * * * *", "0 9 * * *"]
ZONES = [None, "Europe/Istanbul", "America/New_York"]


def register_handlers(handlers: int, per: int) -> list[str]:
    """Register `handlers` classes `bench.s<i>.discover`, each with `per // 2` code entries;
    returns their task names."""
    import registry
    from cronjobs import CronJobHandler

    tasks = []
    for i in range(handlers):
        schedules = [{"name": f"c{n}", "cron": CRONS[n % 3], "payload": {"n": n},
                      **({"timezone": ZONES[n % 3]} if ZONES[n % 3] else {})}
                     for n in range(per // 2)]
        cls = type(f"Sched{i}", (CronJobHandler,), {
            "TYPE": f"bench.s{i}.discover", "SCHEDULES": schedules, "OVERLAP": "allow",
            "handle": lambda self, payload, job: True})
        registry.register(cls.TYPE, cls, "bench.schedules")
        tasks.append(f"bench-s{i}")
    return tasks


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Register the handlers, store the entries, tick, and add the figures."""
    from cronjobs.app import use
    from cronjobs.schedule import entries
    from cronjobs.schedule.scheduler import tick

    handlers, per = (2, 10) if args.quick else (10, args.entries // 10)
    ticks = 2 if args.quick else args.ticks
    results.params = {"entries": handlers * per, "handlers": handlers,
                      "crons": CRONS, "measured_ticks": ticks}
    with stores.database("mariadb") as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        for task in register_handlers(handlers, per):
            for n in range(per - per // 2):
                entries.add(app, task, f"d{n}", CRONS[n % 3], timezone=ZONES[n % 3],
                            payload={"n": n}, by="bench")
        at = datetime(2030, 1, 1, 0, 0)
        start = time.perf_counter()
        first = tick(at, app=app)
        first_ms = (time.perf_counter() - start) * 1000
        times, started = [], []
        for minute in range(1, ticks + 1):
            _complete_all(app)
            start = time.perf_counter()
            done = tick(at + timedelta(minutes=minute), app=app)
            times.append((time.perf_counter() - start) * 1000)
            started.append(len(done.started))
        insert_ms = 1000 / raw_insert_rate(app, 200)
        app.close()
        use(None)
    median = statistics.median(times)
    jobs = statistics.median(started)
    results.add(f"tick over {handlers * per} schedule entries (median of {ticks})", median,
                "ms", baseline=insert_ms * jobs, baseline_name=f"{jobs:g} raw INSERT+COMMIT",
                target=("<=", 300, "value"), note="each: " + ", ".join(f"{t:.0f}" for t in times)
                + f" ms; jobs started: {started}")
    results.add(f"first tick over {handlers * per} entries (creates runtime rows)", first_ms,
                "ms", baseline=insert_ms * len(first.started),
                baseline_name=f"{len(first.started)} raw INSERT+COMMIT")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--entries", type=int, default=1000, help="entries (%(default)s)")
    parser.add_argument("--ticks", type=int, default=3, help="measured ticks (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("schedules", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
