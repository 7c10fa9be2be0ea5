"""Flow control: what limits cost in the claim, all measured in this run on MariaDB.

- What flow control costs a queue with no limit: two 2x8 drains of no-op rows side by
  side, at the same time, each on a database of its own — two stock worker processes
  and two `bench.unpoliced_worker` processes (the claim without a policy: as before
  flow control) — over `--rounds` rounds, the one started first taking turns. The
  figure is each one's rate over the window both were running (target: >= 0.95 x,
  i.e. within 5 %). Run side by side, the two share the cores, the database server and
  whatever else the machine is doing, so its drift cancels out of the ratio: drained
  one after the other, 8 drains in turns read 1,712 to 2,345 jobs/s within 90 s on a
  2-core machine (docs/performance.md), a spread many times the effect measured. Each
  pair gets about half of the machine: its rate is about half of a drain alone.
- Drains of no-op rows by `cronjobs worker` 2x8 of a handler with `LIMIT_KEY` spread
  over 1,000 keys and `CONCURRENCY = 2`, against stock drains of no-op rows (no limit),
  one after the other in the order stock, keyed, keyed, stock (target: >= 0.7 x the
  stock mean). One after the other, not side by side: the keyed claimers wait for each
  other's limiter locks, and side by side those waits would hand their cores to the
  other drain, charging the limit more than it costs alone.
- The claim alone (8 rows per claim, one transaction each, one connection): without a
  policy (no condition: the claim before flow control) against the flow policy with no
  limit configured, taken in turns (no target: it shows what the hold condition's guard
  costs the claim's SELECT, which the drain above pays within its 5 %).

Rates come from the rows' `finished_at`: side by side, the completions within the window
from the later of the two sides' first 2 % of completions to the earlier of their last
ones, over its length; a drain alone, as in the throughput scenario (its first and last
2 % dropped).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from dataclasses import dataclass

import sqlalchemy as sa

from . import procs, report, stores
from .stores import NOOP
from .throughput import _note, cronjobs_drain

KEYED = "bench.keyednoop.execute"


@dataclass(frozen=True)
class Side:
    """One of two drains run side by side: `python -m <module> worker` (2x8) on a
    database of its own holding rows of `job_type` with an empty payload."""

    label: str
    module: str
    job_type: str = NOOP


def side_by_side(sides: tuple[Side, Side], n: int, cap: float) -> dict[str, float]:
    """Drain `n` rows of each side at the same time, each by its own pair of worker
    processes (`procs.worker_pair`, 8 slots each) on its own MariaDB database and Redis
    namespace, for `cap` s after both have completed a row (or until both are done).

    Returns:
        `{label: jobs/s}` over the window both were running (`common_rates`).
    """
    from cronjobs import queue
    from cronjobs.app import use
    from cronjobs.store.models import cronjob_queue as q

    apps, envs, times = {}, {}, {}
    with contextlib.ExitStack() as stack:
        for side in sides:
            url = stack.enter_context(stores.database("mariadb"))
            ns = stack.enter_context(stores.redis_namespace())
            app = apps[side.label] = stores.make_app(url, ns)
            stack.callback(app.close)
            envs[side.label] = stores.worker_env(url, ns)
            for start in range(0, n, 1000):
                queue.dispatch_many([{"type": side.job_type, "payload": {}}]
                                    * min(1000, n - start), app=app)
        pairs = [stack.enter_context(procs.worker_pair(envs[s.label], 8, s.module))
                 for s in sides]
        procs.wait_for(lambda: min(stores.count_rows(a.engine, "completed")
                                   for a in apps.values()), n,
                       procs.Procs([p for pair in pairs for p in pair]), max_seconds=cap,
                       poll_seconds=0.25)
        for pair in pairs:
            pair.stop()
        for label, app in apps.items():
            with app.engine.connect() as conn:
                times[label] = conn.execute(sa.select(q.c.finished_at)
                                            .where(q.c.status == "completed")).scalars().all()
    use(None)
    return common_rates(times)


def common_rates(times: dict[str, list], skip_fraction: float = 0.02) -> dict[str, float]:
    """Jobs/s of each drain over the window they share: from the latest of their first
    completions to the earliest of their last ones, once each drain's first and last
    `skip_fraction` are dropped (start-up, stragglers). A window under a second (tiny
    drains): each drain's own rate (`procs.rate_from_times`)."""
    stamps = {}
    for label, ts in times.items():
        s = sorted(t.timestamp() if hasattr(t, "timestamp") else float(t) for t in ts)
        cut = int(len(s) * skip_fraction)
        stamps[label] = s[cut:len(s) - cut]
    if any(len(s) < 2 for s in stamps.values()):
        return {label: 0.0 for label in stamps}
    lo, hi = max(s[0] for s in stamps.values()), min(s[-1] for s in stamps.values())
    if hi - lo < 1.0:
        return {label: procs.rate_from_times(s, 0) for label, s in stamps.items()}
    return {label: sum(lo <= t <= hi for t in s) / (hi - lo) for label, s in stamps.items()}


def rounds_of(sides: tuple[Side, Side], n: int, cap: float,
              rounds: int) -> tuple[dict[str, float], list[str]]:
    """`rounds` side-by-side drains, the side filled and started first taking turns;
    the mean rate of each side and a note per round."""
    rates: dict[str, list[float]] = {s.label: [] for s in sides}
    notes = []
    for r in range(rounds):
        got = side_by_side(sides if r % 2 == 0 else sides[::-1], n, cap)
        for label, rate in got.items():
            rates[label].append(rate)
        notes.append(" / ".join(f"{label} {got[label]:.0f}" for label in rates))
    return {label: statistics.mean(r) for label, r in rates.items()}, notes


def claim_rates(n: int, seconds: float) -> tuple[float, float]:
    """Claims of 8 rows per second on MariaDB without a policy and with the flow policy
    (no limits), taken in turns from two queues of `n` rows each in one database, so both
    see the same load; seconds of claiming in all."""
    from cronjobs import queue
    from cronjobs.app import use
    from cronjobs.job.executor import Executor
    from cronjobs.store.db import run_in_transaction

    with stores.database("mariadb") as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        for name in ("base", "flow"):
            for start in range(0, n, 1000):
                queue.dispatch_many([{"type": NOOP, "queue": name}] * min(1000, n - start),
                                    app=app)
        executors = {"base": Executor(app, "bench:1", flow=None),
                     "flow": Executor(app, "bench:1")}
        spent = {"base": 0.0, "flow": 0.0}
        claims = 0
        while sum(spent.values()) < seconds and claims * 8 < n:
            for name, executor in executors.items():
                t = time.perf_counter()
                run_in_transaction(app.engine, lambda c, e=executor, q=name: e.claim_rows(
                    c, app.clock.now(), queue=q, limit=8))
                spent[name] += time.perf_counter() - t
            claims += 1
        app.close()
        use(None)
    return claims / spent["base"], claims / spent["flow"]


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Measure the policy's cost side by side, the keyed drain after a stock one, then
    the claim alone with each policy."""
    from cronjobs import queue

    n = 200 if args.quick else args.rows
    cap = 2 if args.quick else args.max_seconds
    seconds = 1 if args.quick else args.claim_seconds
    rounds = 1 if args.quick else args.rounds
    results.params = {"rows": n, "keys": args.keys, "rounds": rounds, "concurrency": 2,
                      "max_seconds": cap, "claim_seconds": seconds, "backend": "mariadb",
                      "worker": "2x8 (per side, side by side)"}
    rates, notes = rounds_of((Side("unpoliced", "bench.unpoliced_worker"),
                              Side("stock", "cronjobs")),
                             n, cap, rounds)
    results.add("drain no-op 2x8 mariadb, flow control without limits", rates["stock"],
                "jobs/s", baseline=rates["unpoliced"],
                baseline_name="the same drain at the same time, claim without a policy",
                note=f"side by side, {rounds} rounds (jobs/s): {', '.join(notes)}",
                target=(">=", 0.95, "ratio"))

    def keyed_rows(app) -> None:
        for start in range(0, n, 1000):
            queue.dispatch_many([{"type": KEYED, "payload": {"key": f"k{i % args.keys}"}}
                                 for i in range(start, min(n, start + 1000))], app=app)

    drains: dict[str, list[float]] = {"stock": [], "keyed": []}
    for kind in ("stock", "keyed", "keyed", "stock"):  # ABBA: a drift favours neither
        rate, drain = (cronjobs_drain("mariadb", n, 2, 8, NOOP, cap) if kind == "stock" else
                       cronjobs_drain("mariadb", n, 2, 8, KEYED, cap, dispatch=keyed_rows))
        drains[kind].append(rate)
    results.add(f"drain no-op 2x8 mariadb, LIMIT_KEY over {args.keys:,} keys, CONCURRENCY 2",
                statistics.mean(drains["keyed"]), "jobs/s",
                baseline=statistics.mean(drains["stock"]),
                baseline_name="stock drains (no limits) before and after",
                note="one after the other, stock / keyed / keyed / stock (jobs/s): " + ", ".join(
                    f"{r:.0f}" for r in (drains["stock"][0], *drains["keyed"],
                                         drains["stock"][1])) + f"; last: {_note(drain, n)}",
                target=(">=", 0.7, "ratio"))
    base, flow = claim_rates(n, seconds)
    results.add("claim of 8 rows, flow policy without limits", flow, "claims/s", baseline=base,
                baseline_name="the claim without a policy",
                note="one connection, one transaction per claim; the policy adds the hold "
                     "condition to the SELECT (its guard reads the pause and block tables "
                     "once): the target is on the drain above")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--rows", type=int, default=20_000,
                        help="jobs per drain and side (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="side-by-side drains for the cost of no limit (%(default)s)")
    parser.add_argument("--keys", type=int, default=1_000, help="limit keys (%(default)s)")
    parser.add_argument("--max-seconds", type=float, default=6,
                        help="longest measuring window per drain, s (%(default)s)")
    parser.add_argument("--claim-seconds", type=float, default=4,
                        help="how long the claims of both policies run in all, s (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("flow", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
