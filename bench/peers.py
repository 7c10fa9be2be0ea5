"""Peers: cronjobs against the Python job queues that also keep their jobs in a database
table, Oban for Python (Oban-py) and Procrastinate, on the same PostgreSQL in this run.

Each system drains the same `--rows` pre-inserted no-op jobs (the peers' are `async def`)
at 1x8 and 2x8 (worker processes x concurrency) in `--rounds` interleaved rounds (round 1:
cronjobs, Oban-py, Procrastinate; round 2 the other way round). Every drain gets a fresh
database of its own, filled with the system's own bulk call and VACUUM ANALYZEd (as
autovacuum would soon after such an insert) before the worker starts. cronjobs runs with
the Redis broker, as in `throughput`, and its database is filled for each drain (the fill
rings Redis); a peer's is filled once per scenario and each drain gets a copy of it
(`CREATE DATABASE ... TEMPLATE`: the same rows, pages and statistics; Oban-py's own fill
took 7-14 s a drain). The VACUUM makes the two alike: a fresh fill leaves 20,000
inserts that autovacuum's next round (within `autovacuum_naptime`, a minute) vacuums,
maybe during the drain, where a copy starts with no such counts; and every drain starts
on vacuumed pages (hint bits and visibility map set). A drain's window opens at the
first finished job and closes when all are done or `--max-seconds` later (the note says
when the cap was hit). Measured:

- drain rate: from the jobs' completion times, first and last 2 % dropped (as `throughput`);
- start-up: worker start to the first completion time;
- CPU seconds per 1,000 jobs of the window: the worker process trees, and the PostgreSQL
  backends connected to the run's database (Redis, used by cronjobs only, is not counted);
- transactions per job: `pg_stat_database.xact_commit` of the run's database from worker
  start until its backends are gone, less the bench's own polls, over the jobs finished;
- PSS of the worker process tree: `--settle` seconds after its first job (8 slots, one
  process, a start of its own: one warm-up job; cronjobs' job process and fork server are
  still alive then, the `memory` scenario measures the worker once they retired) and at
  the end of each drain window.

Ratios are cronjobs / peer. Rates, start-up and memory are medians over the rounds (the
note gives the ratio of each round); CPU and transactions are pooled over all drains.
Oban-py needs Python 3.12 (a venv under `bench/.venvs/`, made on first use); without one
it is skipped with one line. Targets: 2x8 drain >= 1.5 x Oban-py and >= 3 x Procrastinate;
start-up <= 0.5 s; 8-slot worker <= 60 MB PSS after its first job, <= 120 MB after the 1x8
drain.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from statistics import median

import psycopg

from . import peer_systems, procs, report, stores
from .peer_systems import System, libpq_dsn

ADMIN_DSN = libpq_dsn(stores.POSTGRES) + "/test"
START_TIMEOUT = 120
DRAIN_TARGETS = {"oban-py": 1.5, "procrastinate": 3.0}


@dataclass
class DrainRun:
    """One drain of one system (JSON: `details.runs`). Times in s, CPU in s, PSS in MB."""

    system: str
    config: str
    round: int
    rows: int
    setup_seconds: float
    startup_seconds: float
    rate: float
    done: int
    window_seconds: float
    window_jobs: int
    complete: bool
    worker_cpu_seconds: float
    pg_cpu_seconds: float
    transactions: int
    pss_mb: float
    rss_mb: float
    processes: int


def _first_done(conn: psycopg.Connection, system: System, running: procs.Procs) -> tuple[int, int]:
    """Poll every 50 ms until a job has finished; `(jobs done, polls made)`."""
    deadline, polls = time.monotonic() + START_TIMEOUT, 0
    while True:
        polls += 1
        done = conn.execute(system.done_sql).fetchone()[0]
        if done:
            return done, polls
        running.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{system.name}: no job finished within {START_TIMEOUT} s")
        time.sleep(0.05)


def _window(conn: psycopg.Connection, admin: psycopg.Connection, db: str, system: System,
            running: procs.Procs, rows: int, cap: float) -> dict:
    """From the first finished job until `rows` are done or `cap` s: jobs, seconds, CPU
    of the worker trees and of the database's other backends, polls made on `conn`."""
    roots = [p.pid for p in running]
    me = conn.info.backend_pid
    worker = procs.CpuMeter(lambda: procs.tree_pids(roots))
    backends = procs.CpuMeter(lambda: [r[0] for r in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> %s "
        "AND backend_type = 'client backend'", (db, me))])
    first, polls = _first_done(conn, system, running)
    worker.start()
    backends.start()
    t0, done = time.monotonic(), first
    while done < rows and time.monotonic() - t0 < cap:
        time.sleep(0.25)
        running.check()
        worker.sample()
        backends.sample()
        done = conn.execute(system.done_sql).fetchone()[0]
        polls += 1
    return {"first": first, "done": done, "seconds": time.monotonic() - t0,
            "worker_cpu": worker.seconds(), "pg_cpu": backends.seconds(), "polls": polls}


def _settled_commits(admin: psycopg.Connection, db: str) -> int:
    """`xact_commit` of `db` once no backend is connected to it (a backend's counts reach
    the statistics when it exits) and two reads 0.3 s apart agree (at most ~15 s)."""
    deadline = time.monotonic() + 15
    sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
    while admin.execute(sql, (db,)).fetchone()[0] and time.monotonic() < deadline:
        time.sleep(0.1)
    last = None
    while True:
        now = admin.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                            (db,)).fetchone()[0]
        if now == last or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.3)


@contextmanager
def filled(system: System, rows: int) -> Iterator[str | None]:
    """For a `copyable` system: a database filled with its `rows` no-op jobs (VACUUM ANALYZEd),
    that `drain` copies (yields its name; dropped afterwards). Else None: `drain` fills
    a database of its own."""
    if not system.copyable:
        yield None
        return
    with stores.pg_database() as (db, url), stores.redis_namespace() as ns:
        _fill(system, url, ns, rows)
        yield db


def _fill(system: System, url: str, ns: str, rows: int) -> None:
    system.prepare(url, ns, rows)
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def drain(system: System, rows: int, slots: int, processes: int, cap: float,
          round_no: int = 1, template: str | None = None) -> DrainRun:
    """Drain `rows` no-op jobs with `processes` x `slots` workers of `system`, in a fresh
    database filled with them, or a copy of `template` (`filled`); see the module
    docstring for what is measured."""
    t = time.monotonic()
    with (stores.pg_database(template) as (db, url), stores.redis_namespace() as ns,
          psycopg.connect(ADMIN_DSN, autocommit=True) as admin):
        if template is None:
            _fill(system, url, ns, rows)
        setup = time.monotonic() - t
        before = _settled_commits(admin, db)
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            started = time.time()
            with system.start(url, ns, slots, processes) as running:
                w = _window(conn, admin, db, system, running, rows, cap)
                mem = procs.tree_memory([p.pid for p in running])
        transactions = _settled_commits(admin, db) - before - w["polls"]
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            times = [r[0] for r in conn.execute(system.times_sql)]
    return DrainRun(system.name, f"{processes}x{slots}", round_no, rows, round(setup, 2),
                 round(min(times) - started, 3), round(procs.rate_from_times(times), 1),
                 len(times), round(w["seconds"], 2), w["done"] - w["first"], w["done"] >= rows,
                 round(w["worker_cpu"], 2), round(w["pg_cpu"], 2), transactions,
                 mem["pss_mb"], mem["rss_mb"], mem["processes"])


def idle_memory(system: System, slots: int, settle: float) -> dict:
    """PSS of one idle worker process tree with `slots` slots: started on a database with
    one job, measured `settle` s after that job finished (`procs.tree_memory`'s dict)."""
    with stores.pg_database() as (_db, url), stores.redis_namespace() as ns:
        system.prepare(url, ns, 1)
        with (psycopg.connect(libpq_dsn(url), autocommit=True) as conn,
              system.start(url, ns, slots, 1) as running):
            _first_done(conn, system, running)
            time.sleep(settle)
            return procs.tree_memory([p.pid for p in running])


def _per_1000(drains: list[DrainRun], field: str) -> float:
    """Seconds of `field` per 1,000 jobs, pooled over `drains`' windows."""
    jobs = sum(d.window_jobs for d in drains)
    return 1000 * sum(getattr(d, field) for d in drains) / jobs if jobs else 0.0


def _transactions_per_job(drains: list[DrainRun]) -> float:
    """Committed transactions per finished job, pooled over `drains`."""
    return sum(d.transactions for d in drains) / max(1, sum(d.done for d in drains))


def _done_note(drains: list[DrainRun]) -> str:
    capped = [d for d in drains if not d.complete]
    if not capped:
        return f"all {drains[0].rows} drained"
    return "capped: " + ", ".join(f"{d.window_jobs} jobs in {d.window_seconds:.0f} s"
                                  for d in capped)


def _drain_figures(results: report.Results, runs: dict, peers: list[System],
                   labels: tuple[str, str]) -> None:
    """The drain rates at 1xN and 2xN against each peer (targets at 2xN)."""
    ours = runs["cronjobs"]
    for label in labels:
        for peer in peers:
            theirs = runs[peer.name][label]
            ratios = ", ".join(f"{a.rate / b.rate:.2f}"
                               for a, b in zip(ours[label], theirs, strict=True))
            target = (">=", DRAIN_TARGETS[peer.name], "ratio") if label == labels[1] else None
            results.add(f"drain no-op {label} postgresql", median(d.rate for d in ours[label]),
                        "jobs/s", baseline=median(d.rate for d in theirs),
                        baseline_name=f"{peer.name} {label}", target=target,
                        note=f"ratio per round: {ratios}; cronjobs {_done_note(ours[label])}; "
                             f"{peer.name} {_done_note(theirs)}")
        if not peers:
            results.add(f"drain no-op {label} postgresql", median(d.rate for d in ours[label]),
                        "jobs/s", note="no peer could run")


def _compare(results: report.Results, name: str, unit: str, value: float,
             theirs: dict[str, float], suffix: str = "", target: tuple | None = None,
             note: str = "") -> None:
    """cronjobs' `value` against each peer's (`theirs`: peer -> value); a target is put on
    the first row only, so each verdict is printed once."""
    rows = list(theirs.items()) or [(None, None)]
    for i, (peer, base) in enumerate(rows):
        results.add(name, value, unit, baseline=base,
                    baseline_name=f"{peer}{suffix}" if peer else None,
                    target=target if i == 0 else None, note=note)


def _other_figures(results: report.Results, runs: dict, idle: dict, peers: list[System],
                   labels: tuple[str, str], slots: int) -> None:
    """Start-up, CPU per 1,000 jobs, PSS after the first job and after the drains,
    transactions per job."""
    one, two = labels
    settle = results.params["settle_s"]
    names = ["cronjobs", *(p.name for p in peers)]
    every = {n: runs[n][one] + runs[n][two] for n in names}

    def per_system(fn) -> tuple[float, dict[str, float]]:
        values = {n: fn(n) for n in names}
        return values.pop("cronjobs"), values

    startup2 = ", ".join(f"{n} {median(d.startup_seconds for d in runs[n][two]):.2f} s"
                         for n in names)
    ours, theirs = per_system(lambda n: median(d.startup_seconds for d in runs[n][one]))
    _compare(results, f"start-up {one} to first completion", "s", ours, theirs, f" {one}",
             ("<=", 0.5, "value"), f"{two}: {startup2}")
    split = "; ".join(f"{n} worker {_per_1000(every[n], 'worker_cpu_seconds'):.2f} + postgres "
                      f"{_per_1000(every[n], 'pg_cpu_seconds'):.2f}" for n in names)
    ours, theirs = per_system(lambda n: _per_1000(every[n], "worker_cpu_seconds")
                              + _per_1000(every[n], "pg_cpu_seconds"))
    _compare(results, "CPU per 1,000 jobs, worker + PostgreSQL", "s", ours, theirs,
             note=f"{split} (Redis not counted)")
    procs_note = ", ".join(f"{n} {idle[n]['processes']} process"
                           + ("es" if idle[n]["processes"] > 1 else "") for n in names)
    ours, theirs = per_system(lambda n: idle[n]["pss_mb"])
    _compare(results, f"worker PSS {slots} slots, {settle:g} s after its first job", "MB",
             ours, theirs, ", 1 process",
             ("<=", 60, "value"), procs_note)
    for label, target in ((one, ("<=", 120, "value")), (two, None)):
        ours, theirs = per_system(lambda n, lb=label: median(d.pss_mb for d in runs[n][lb]))
        _compare(results, f"worker PSS after the {label} drain", "MB", ours, theirs,
                 f" {label}", target)
    ours, theirs = per_system(lambda n: _transactions_per_job(every[n]))
    _compare(results, "transactions committed", "per job", ours, theirs,
             note="xact_commit of the run's database, worker start to stop, less the "
                  "bench's polls")


def _peer_table(results: report.Results, systems: list[System], runs: dict, idle: dict,
                skipped: dict[str, str], labels: tuple[str, str]) -> None:
    """One row per system: the figures side by side and what each guarantees."""
    one, two = labels
    columns = ["system", f"drain {one}", f"drain {two}", f"start-up {one}",
               "CPU / 1,000 jobs (worker + PostgreSQL)",
               f"PSS {results.params['settle_s']:g} s after a job / after {one} / after {two}",
               "transactions / job (measured)", "hard timeout", "at-least-once"]
    rows = []
    for s in systems:
        r, every = runs[s.name], runs[s.name][one] + runs[s.name][two]
        w, p = _per_1000(every, "worker_cpu_seconds"), _per_1000(every, "pg_cpu_seconds")
        rows.append([
            f"{s.name} {s.version}", f"{median(d.rate for d in r[one]):,.0f} jobs/s",
            f"{median(d.rate for d in r[two]):,.0f} jobs/s",
            f"{median(d.startup_seconds for d in r[one]):.2f} s",
            f"{w + p:.2f} s ({w:.2f} + {p:.2f})",
            f"{idle[s.name]['pss_mb']:.0f} / {median(d.pss_mb for d in r[one]):.0f} / "
            f"{median(d.pss_mb for d in r[two]):.0f} MB",
            f"{_transactions_per_job(every):.2f}", s.hard_timeout, s.at_least_once])
    for name, why in skipped.items():
        rows.append([name, f"skipped ({why})", *[""] * (len(columns) - 2)])
    results.add_table("the systems side by side (medians over the rounds) and their "
                      "guarantees", columns, rows)


def run(args: argparse.Namespace, results: report.Results) -> None:
    """Idle memory of each system, then the interleaved drain rounds; figures and table."""
    rows = 200 if args.quick else args.rows
    slots = 2 if args.quick else args.slots
    rounds = 1 if args.quick else args.rounds
    cap = 3 if args.quick else args.max_seconds
    settle = 0.5 if args.quick else args.settle
    labels = (f"1x{slots}", f"2x{slots}")
    systems, skipped = peer_systems.available()
    results.params = {"rows": rows, "slots": slots, "rounds": rounds, "max_seconds": cap,
                      "settle_s": settle, "database": "postgresql, one database per drain",
                      "systems": {s.name: s.version for s in systems}, "skipped": skipped}
    idle = {s.name: idle_memory(s, slots, settle) for s in systems}
    runs: dict[str, dict[str, list[DrainRun]]] = {s.name: {lb: [] for lb in labels}
                                               for s in systems}
    with ExitStack() as templates:
        template = {s.name: templates.enter_context(filled(s, rows)) for s in systems}
        _rounds(runs, systems, template, rows, slots, rounds, cap, labels)
    peers = systems[1:]
    _drain_figures(results, runs, peers, labels)
    _other_figures(results, runs, idle, peers, labels, slots)
    _peer_table(results, systems, runs, idle, skipped, labels)
    results.details = {"idle": idle, "skipped": skipped,
                       "runs": [asdict(d) for s in runs.values() for ds in s.values()
                                for d in ds]}


def _rounds(runs: dict, systems: list[System], template: dict[str, str | None], rows: int,
            slots: int, rounds: int, cap: float, labels: tuple[str, str]) -> None:
    """The interleaved drain rounds, each appended to `runs[system][label]`."""
    for round_no in range(1, rounds + 1):
        order = systems if round_no % 2 else systems[::-1]
        for processes, label in zip((1, 2), labels, strict=True):
            for system in order:
                d = drain(system, rows, slots, processes, cap, round_no, template[system.name])
                runs[system.name][label].append(d)
                print(f"round {round_no} {system.name} {label}: {d.rate:,.0f} jobs/s, start-up "
                      f"{d.startup_seconds:.2f} s, {d.transactions / max(1, d.done):.2f} "
                      f"transactions/job, PSS {d.pss_mb:.0f} MB", flush=True)


def add_args(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario."""
    parser.add_argument("--rows", type=int, default=20_000, help="jobs per drain (%(default)s)")
    parser.add_argument("--slots", type=int, default=8,
                        help="concurrency per worker process (%(default)s)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="interleaved rounds (%(default)s)")
    parser.add_argument("--max-seconds", type=float, default=5,
                        help="longest measuring window per drain, s (%(default)s)")
    parser.add_argument("--settle", type=float, default=2,
                        help="idle wait before the idle PSS, s (%(default)s)")


def main(argv: list[str] | None = None) -> dict:
    """Run the scenario from the command line."""
    return report.scenario_main("peers", __doc__, run, add_args, argv)


if __name__ == "__main__":
    main()
