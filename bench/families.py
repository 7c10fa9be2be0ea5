"""Families: one discover fanning out `--children` no-op rows, drained by `cronjobs
worker` 2x8 on MariaDB and PostgreSQL (Redis), against the same number of parentless
no-op rows drained by the same worker in the same run.

- The callback's delay: from the last child's `finished_at` to the `on_complete` row's
  `started_at` (its claim) — the completion is decided in the transaction that finishes
  the family's last row (`family.settle`), its row rung after that commit. Target: <= 1 s.
- The family's drain rate (the children's `finished_at`, first and last 2 % dropped, as
  the throughput scenario) against a drain of parentless rows, the two taken in turns
  (family, parentless, parentless, family: a drift of the machine favours neither; the
  means compared). Target: >= 0.9 x. What a family adds per finishing batch: one read
  for a free running row of the family, locked (`running_witness`); the root locked only
  when none is left.
"""

from __future__ import annotations

import argparse
import statistics
import time

import sqlalchemy as sa

from . import procs, report, stores
from .stores import NOOP
from .throughput import cronjobs_drain

DISCOVER = "bench.family.discover"
COMPLETE = "bench.family.complete"


def family_drain(backend: str, n: int, threads: int, cap: float) -> dict:
    """One discover with `n` no-op children, drained by `cronjobs worker 2x<threads>`
    until its `on_complete` row has run (at most `cap` s after the first completion).

    Returns:
        `{"rate": children/s, "delay": s from the last child's finish to the callback's
        start (None: no callback within the cap), "callbacks": callback rows,
        "children": children finished, "counts": what the callback saw}`.
    """
    import json

    from cronjobs import queue
    from cronjobs.app import use
    from cronjobs.store.models import cronjob_queue as q

    with stores.database(backend) as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        root = queue.dispatch(DISCOVER, {"children": n}, app=app)
        app.broker.flush()

        def called_back() -> int:
            with app.engine.connect() as conn:
                done = conn.execute(sa.select(sa.func.count()).where(
                    q.c.parent_id == root, q.c.root_id.is_(None),
                    q.c.status == "completed")).scalar_one()
            return n if done else 0

        with procs.cronjobs_worker(stores.worker_env(url, ns), threads, 2) as running:
            procs.wait_for(called_back, n, running, max_seconds=cap, poll_seconds=0.25)
        with app.engine.connect() as conn:
            times = conn.execute(sa.select(q.c.finished_at).where(
                q.c.root_id == root, q.c.status == "completed")).scalars().all()
            calls = conn.execute(sa.select(q.c.type, q.c.started_at, q.c.result_payload)
                                 .where(q.c.parent_id == root, q.c.root_id.is_(None))
                                 ).mappings().all()
        app.close()
        use(None)
    started = [c["started_at"] for c in calls if c["type"] == COMPLETE and c["started_at"]]
    delay = (started[0] - max(times)).total_seconds() if started and times else None
    seen = [json.loads(c["result_payload"]) for c in calls if c["result_payload"]]
    return {"rate": procs.rate_from_times(times), "delay": delay, "callbacks": len(calls),
            "children": len(times), "counts": seen[0].get("counts") if seen else None}


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Per backend: family, parentless, parentless, family; the callback's delays and the
    rates' means."""
    n = 300 if args.quick else args.children
    cap = 20 if args.quick else args.max_seconds
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    results.params = {"children": n, "worker": f"2x{args.threads}", "backends": backends,
                      "max_seconds": cap, "order": "family, parentless, parentless, family"}
    for backend in backends:
        families, plain = [], []
        for kind in ("family", "plain", "plain", "family"):
            t = time.monotonic()
            if kind == "family":
                families.append(family_drain(backend, n, args.threads, cap))
            else:
                plain.append(cronjobs_drain(backend, n, 2, args.threads, NOOP, cap)[0])
            print(f"families: {backend} {kind} {time.monotonic() - t:.0f} s", flush=True)
        results.details[backend] = {"families": families, "parentless": plain}
        delays = [f["delay"] for f in families]
        worst = None if None in delays else max(delays)
        results.add(f"family of {n:,} no-op children 2x{args.threads} {backend}: last child "
                    "finished -> on_complete started", worst, "s", target=("<=", 1.0, "value"),
                    note="the worse of 2 runs: " + ", ".join(
                        "no callback" if d is None else f"{d:.3f} s" for d in delays)
                    + f"; callback rows {[f['callbacks'] for f in families]}")
        results.add(f"drain of a family's {n:,} no-op children 2x{args.threads} {backend}",
                    statistics.mean(f["rate"] for f in families), "jobs/s",
                    baseline=statistics.mean(plain),
                    baseline_name=f"{n:,} parentless no-op rows, same worker, same run",
                    target=(">=", 0.9, "ratio"),
                    note="family / parentless / parentless / family (jobs/s): " + ", ".join(
                        f"{r:.0f}" for r in (families[0]["rate"], *plain, families[1]["rate"])))


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--children", type=int, default=20_000,
                        help="children of the discover, and parentless rows (%(default)s)")
    parser.add_argument("--threads", type=int, default=8, help="slots per process (%(default)s)")
    parser.add_argument("--max-seconds", type=float, default=90,
                        help="longest wait for a drain after its first completion, s "
                             "(%(default)s)")
    parser.add_argument("--backends", default="mariadb,postgresql",
                        help="comma-separated (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("families", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
