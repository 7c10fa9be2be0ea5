"""A rate's starts spread across its window: `RATE_LIMIT = "10/s"` (handler
`bench.ratedstamp.execute`), three `cronjobs worker` processes of 4 slots, `--rows` rows
(300), `--runs` runs (5) on MariaDB and on PostgreSQL, each on a fresh database.

The figure is the most handler starts in any rolling second (half-open), the timestamps
taken inside the handler (`time.time()` first thing in `handle`, returned as its result):
what an API that counts its own window sees. Target: at most 11 (the claims are spaced
1/rate apart and never more than 10 in a rolling second; a job process's start jitter may
bring one more into a second). Also shown: the claims' busiest second (`started_at`: the
claiming worker's clock read just before its claim, so a wait for the limiter's lock may
show one more than the start log holds) and the rate achieved (rows over the span of
their handler starts; a little under 10/s: each start waits the whole 0.1 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import sqlalchemy as sa

from . import procs, report, stores

RATED = "bench.ratedstamp.execute"
TARGET = 11


def busiest_second(stamps: list[float]) -> int:
    """The most of `stamps` (seconds) within any rolling second (half-open)."""
    stamps = sorted(stamps)
    return max((sum(1 for t in stamps[i:] if t - s < 1.0) for i, s in enumerate(stamps)),
               default=0)


def one_run(backend: str, rows: int) -> dict:
    """Dispatch `rows` rated rows, drain them with three workers; returns the busiest
    second of handler starts and of claims, and the rate achieved (starts/s)."""
    from cronjobs.store.models import cronjob_queue as q

    with stores.database(backend) as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        stores.dispatch_rows(app, rows, RATED)
        env = stores.worker_env(url, ns)
        cmd = ["worker", "--queues", "default", "--slots", "4", "--processes", "1"]
        workers = procs.Procs(procs.Proc([sys.executable, "-m", "cronjobs", *cmd],
                                         f"cronjobs worker {i + 1}/3", env) for i in range(3))
        with workers:
            procs.wait_for(lambda: stores.count_rows(app.engine, "completed"), rows, workers,
                           max_seconds=rows / 10 * 3 + 30)
        with app.engine.connect() as conn:
            got = conn.execute(sa.select(q.c.result_payload, q.c.started_at).where(
                q.c.status == "completed")).all()
        app.close()
    stamps = [json.loads(r)["t"] for r, _ in got]
    claims = [t.timestamp() for _, t in got]
    return {"done": len(got), "handler": busiest_second(stamps),
            "claims": busiest_second(claims),
            "rate": (len(stamps) - 1) / max(1e-6, max(stamps) - min(stamps))}


def run(args: argparse.Namespace, results: report.Results) -> None:
    """`--runs` runs per backend; one figure per backend (the worst run)."""
    runs = 1 if args.quick else args.runs
    rows = 30 if args.quick else args.rows
    backends = ["mariadb"] if args.quick else ["mariadb", "postgresql"]
    results.params = {"rows": rows, "runs": runs, "backends": backends, "rate": "10/s",
                      "workers": "3 x 4 slots", "target": f"<= {TARGET} handler starts"}
    for backend in backends:
        done = [one_run(backend, rows) for _ in range(runs)]
        results.details[backend] = done
        results.add(f"RATE_LIMIT 10/s, 3 workers, {rows} rows x {runs} runs, {backend}: most "
                    f"handler starts in a rolling second", max(d["handler"] for d in done),
                    "starts", target=("<=", TARGET, "value"),
                    note="per run: handler " + ", ".join(str(d["handler"]) for d in done)
                    + "; claims " + ", ".join(str(d["claims"]) for d in done)
                    + f"; rows done {sum(d['done'] for d in done)}/{rows * runs}; rate "
                    f"{statistics.mean(d['rate'] for d in done):.2f} starts/s")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--rows", type=int, default=300, help="rows per run (%(default)s)")
    parser.add_argument("--runs", type=int, default=5, help="runs per backend (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("rate", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
