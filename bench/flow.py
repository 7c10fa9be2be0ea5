"""Flow control: what limits cost in the claim, all measured in this run on MariaDB.

- What flow control costs a queue with no limit: the 2x8 drain of no-op rows by two
  stock worker processes against two `bench.unpoliced_worker` processes (the claim
  without a policy: as before flow control), taken in turns (ABBA), `--rounds` each (target:
  >= 0.95 x, i.e. within 5 %).
- Drain of no-op rows by `cronjobs worker` 2x8 (Redis) of a handler with `LIMIT_KEY`
  spread over 1,000 keys and `CONCURRENCY = 2`, against the stock drains above (no limit;
  target: >= 0.7 x).
- The claim alone (8 rows per claim, one transaction each, one connection): without a
  policy (no condition: the claim before flow control) against the flow policy with no
  limit configured, taken in turns (no target: it shows what the hold condition's guard
  costs the claim's SELECT, which the drain above pays within its 5 %).

Rates of drains come from the rows' `finished_at` (first and last 2 % dropped), as in
the throughput scenario.
"""

from __future__ import annotations

import argparse
import statistics
import time

from . import procs, report, stores
from .stores import NOOP
from .throughput import _note, cronjobs_drain

KEYED = "bench.keyednoop.execute"


def claim_rates(n: int, seconds: float) -> tuple[float, float]:
    """Claims of 8 rows per second on MariaDB without a policy and with the flow policy
    (no limits), taken in turns from two queues of `n` rows each in one database, so both
    see the same load; seconds of claiming in all."""
    from cronjobs import queue, store
    from cronjobs.app import use
    from cronjobs.db import run_in_transaction
    from cronjobs.executor import Executor

    with stores.database("mariadb") as url, stores.redis_namespace() as ns:
        app = stores.make_app(url, ns)
        for name in ("base", "flow"):
            for start in range(0, n, 1000):
                queue.dispatch_many([{"type": NOOP, "queue": name}] * min(1000, n - start),
                                    app=app)
        executors = {"base": Executor(app, "bench:1", claim_policy=store.ClaimPolicy()),
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


def keyed_drain(n: int, keys: int, cap: float) -> tuple[float, object]:
    """Drain `n` rows of the keyed handler over `keys` keys with a 2x8 worker."""
    from cronjobs import queue

    def dispatch(app) -> None:
        for start in range(0, n, 1000):
            queue.dispatch_many([{"type": KEYED, "payload": {"key": f"k{i % keys}"}}
                                 for i in range(start, min(n, start + 1000))], app=app)

    return cronjobs_drain("mariadb", n, 2, 8, KEYED, cap, dispatch=dispatch)


def policy_cost(n: int, cap: float, rounds: int) -> tuple[float, float, list[str]]:
    """Mean 2x8 drain rates (jobs/s) of the stock worker and of the worker without a
    claim policy, drained in turns (`rounds` each; ABBA order: unpoliced first in even
    rounds, stock first in odd ones, so a drift of the machine over the run favours
    neither), and notes."""
    rates: dict[str, list[float]] = {"stock": [], "unpoliced": []}
    notes = []
    pair = [("unpoliced", "bench.unpoliced_worker"), ("stock", "cronjobs")]
    for r in range(rounds):
        for kind, module in (pair if r % 2 == 0 else pair[::-1]):
            rate, drain = cronjobs_drain("mariadb", n, 2, 8, NOOP, cap,
                                         worker=lambda env, m=module: procs.worker_pair(
                                             env, 8, m))
            rates[kind].append(rate)
            notes.append(f"{kind} {rate:.0f}")
    return (statistics.mean(rates["stock"]), statistics.mean(rates["unpoliced"]), notes)


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Measure the unlimited and the keyed drain, then the claim alone with each policy."""
    n = 200 if args.quick else args.rows
    cap = 3 if args.quick else args.max_seconds
    seconds = 1 if args.quick else args.claim_seconds
    results.params = {"rows": n, "keys": args.keys, "rounds": args.rounds, "concurrency": 2,
                      "max_seconds": cap, "claim_seconds": seconds, "backend": "mariadb",
                      "worker": "2x8"}
    rounds = 1 if args.quick else args.rounds
    stock, unpoliced, notes = policy_cost(n, cap, rounds)
    results.add("drain no-op 2x8 mariadb, flow control without limits", stock, "jobs/s",
                baseline=unpoliced, baseline_name="the same drain, claim without a policy",
                note=f"{rounds} rounds in turns: {', '.join(notes)}",
                target=(">=", 0.95, "ratio"))
    keyed, drain = keyed_drain(n, args.keys, cap)
    results.add(f"drain no-op 2x8 mariadb, LIMIT_KEY over {args.keys:,} keys, CONCURRENCY 2",
                keyed, "jobs/s", baseline=stock,
                baseline_name="the stock drain above (no limits)",
                note=_note(drain, n), target=(">=", 0.7, "ratio"))
    base, flow = claim_rates(n, seconds)
    results.add("claim of 8 rows, flow policy without limits", flow, "claims/s", baseline=base,
                baseline_name="the claim without a policy",
                note="one connection, one transaction per claim; the policy adds the hold "
                     "condition to the SELECT (its guard reads the pause and block tables "
                     "once): the target is on the drain above")


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--rows", type=int, default=20_000, help="jobs per drain (%(default)s)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="drains of each worker for the cost of no limit (%(default)s)")
    parser.add_argument("--keys", type=int, default=1_000, help="limit keys (%(default)s)")
    parser.add_argument("--max-seconds", type=float, default=9,
                        help="longest measuring window per drain, s (%(default)s)")
    parser.add_argument("--claim-seconds", type=float, default=4,
                        help="how long the claims of both policies run in all, s (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("flow", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
