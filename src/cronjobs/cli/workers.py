"""Process commands: worker, workers, serve."""

from __future__ import annotations

import functools
import sys

import click

from .base import EXIT_BAD_INPUT, Integer, _app, _dump, _fail, _table, main


@main.command()
@click.option("--queues", help="Comma-separated queues (default: every handler's queue).")
@click.option("--processes", type=Integer(min=1), default=1, show_default=True)
@click.option("--slots", type=Integer(min=1), default=None,
              help="Jobs run at the same time per process, one job process each (default: 8).")
@click.option("--threads", type=Integer(min=1), default=None, deprecated="use --slots",
              help="The old name of --slots.")
@click.option("--max-jobs", type=Integer(min=1), help="Recycle after this many jobs.")
@click.option("--memory-limit", type=click.FloatRange(min=1), metavar="MB",
              help="Recycle when the process and its job processes use this much memory.")
@click.option("--time-limit", type=click.FloatRange(min=1), metavar="S",
              help="Recycle after this many seconds.")
@click.option("--shutdown-timeout", type=click.FloatRange(min=0), default=30, show_default=True,
              metavar="S", help="After SIGTERM, seconds running jobs may take to finish.")
@click.option("--log-dir", type=click.Path(file_okay=False),
              help="Also log to DIR/workers-YYYY-MM-DD.log (default CRONJOBS_LOG_DIR).")
@click.option("--prefetch", type=Integer(min=1),
              help="Messages fetched from the broker per queue at a time (default: 2 x "
                   "--slots, at least 16). Messages only wake the worker; rows are claimed "
                   "for idle slots.")
@click.option("--isolation", type=click.Choice(["handler", "process"]), default="handler",
              show_default=True,
              help="handler: each handler's ISOLATION (a job process, stopped at MAX_RUNTIME, "
                   "unless the handler says 'thread'); process: every job in a job process.")
@click.option("--burst", is_flag=True,
              help="Run every row of the queues that is due now, then exit 0 and print how "
                   "many ran, failed and were left waiting. Needs no broker.")
def worker(queues: str | None, processes: int, slots: int | None, threads: int | None,
           max_jobs: int | None, memory_limit: float | None, time_limit: float | None,
           shutdown_timeout: float, log_dir: str | None, prefetch: int | None,
           isolation: str, burst: bool) -> None:
    """Run jobs of the queues until SIGTERM/SIGINT or a recycling limit (exit 0).

    Each process has --slots slots; each job runs in a job process forked from a
    preloaded fork server and is stopped at its MAX_RUNTIME (or, for a handler that says
    ISOLATION = "thread", in a thread of the worker, unless --isolation process).

    With --burst the worker runs what is due now and exits when a claim finds nothing
    due and none of its jobs runs (a deploy step, a cron line, one queue by hand): rows
    due later, and due rows held back from the claim, are counted as waiting. Exit 0
    once nothing is left; 1 when a signal stopped it first."""
    slots = _slots(slots, threads, 8)
    if burst:
        _burst_usage(processes, max_jobs, memory_limit, time_limit)
    from .. import logs  # lazy: CLI start-up time
    from ..schedule.tasks import unknown_sections
    from ..worker.children import run_children
    from ..worker.loop import Limits, connections_needed, run_worker

    app = _app(pool_size=connections_needed(slots) if processes == 1 else None)
    names = app.queues() if queues is None else [q.strip() for q in queues.split(",") if q.strip()]
    if not names:
        raise click.BadParameter(f"no queue names in {queues!r}", param_hint="--queues")
    _import_for_workers(None if burst else app.settings.broker_url)
    if processes == 1:  # a copy of this process, before it connects or starts a thread
        from ..worker.runner import start_fork_server

        start_fork_server(fork=True)
    _check_tables(app)
    logs.add_daily_file(log_dir or app.settings.log_dir)
    any_queue = any(getattr(cls, "ANY_QUEUE", False)  # the Django task handler: every queue
                    for cls in app.handlers.registered_handlers().values())
    for name in set() if any_queue else set(names) - set(app.queues()):
        click.echo(f"warning: no registered handler uses queue {name!r}", err=True)
    for line in unknown_sections(app):
        click.echo(f"warning: {line}", err=True)
    if burst:
        _run_burst(app, names, slots, shutdown_timeout, isolation)
    limits = Limits(max_jobs=max_jobs, memory_mb=memory_limit, time_seconds=time_limit)
    if processes > 1:  # forked children share what this process imported; each builds its App
        app.close()
        sys.exit(run_children(functools.partial(
            _child_worker, names, slots, limits, shutdown_timeout, log_dir, prefetch,
            isolation), processes))
    sys.exit(run_worker(app, names, slots, limits=limits, shutdown_timeout=shutdown_timeout,
                        prefetch=prefetch, isolation=isolation))


def _import_for_workers(broker_url: str | None) -> None:
    """Import, before anything forks, what a worker process and its job processes need
    (the broker's client unless `broker_url` is None): the forked fork server and the
    children of `--processes N` then share these pages."""
    import encodings.idna  # noqa: F401  (connecting by host name)

    import psutil  # noqa: F401  (the heartbeat's memory figure)

    from ..broker import import_client
    from ..worker import jobprocess  # noqa: F401

    if broker_url is not None:
        import_client(broker_url)


def _check_tables(app) -> None:
    """Refuse a database without the current cronjobs tables (`cronjobs migrate` not run)
    before any worker starts: its loop would fail at the first claim, and a supervisor (or
    `--processes N`) would start it again forever. A database that cannot be reached now
    is left to the worker, which waits for it."""
    from ..errors import DatabaseUnavailable
    from ..store.db import run_in_transaction

    try:  # cronjob_stop: the newest table (migration 0011)
        run_in_transaction(app.engine, lambda conn: conn.exec_driver_sql(
            "SELECT 1 FROM cronjob_stop WHERE 1 = 0").all(), attempts=1)
    except DatabaseUnavailable:
        pass


def _child_worker(names: list[str], slots: int, limits, shutdown_timeout: float,
                  log_dir: str | None, prefetch: int | None, isolation: str, signals) -> int:
    """One child of `worker --processes N` (forked by `run_children`): the worker of one
    process, as `--processes 1` runs it; returns its exit code. It runs outside click's
    error handling (the fork returned into multiprocessing), so our errors are one line
    here too."""
    from .. import logs
    from ..errors import CronjobsError
    from ..worker.loop import connections_needed, run_worker
    from ..worker.runner import start_fork_server

    try:
        app = _app(pool_size=connections_needed(slots))
        app.handlers.load()
        start_fork_server(fork=True)
        logs.add_daily_file(log_dir or app.settings.log_dir)
        return run_worker(app, names, slots, limits=limits, shutdown_timeout=shutdown_timeout,
                          signals=signals, prefetch=prefetch, isolation=isolation)
    except CronjobsError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)


def _burst_usage(processes: int, max_jobs: int | None, memory_limit: float | None,
                 time_limit: float | None) -> None:
    """A burst runs in one process and ends by itself: no children, no recycling limits."""
    if processes != 1:
        raise click.UsageError(f"--burst runs in one process: drop --processes {processes} "
                               f"(use --slots for more jobs at once)")
    for flag, value in (("--max-jobs", max_jobs), ("--memory-limit", memory_limit),
                        ("--time-limit", time_limit)):
        if value is not None:
            raise click.UsageError(f"--burst ends when nothing is due: drop {flag} {value:g}")


def _run_burst(app, names: list[str], slots: int, shutdown_timeout: float,
               isolation: str) -> None:
    """Run the burst, print its one-line summary and exit with its status."""
    from ..worker.burst import run_burst  # lazy: CLI start-up time

    code, report = run_burst(app, names, slots, shutdown_timeout=shutdown_timeout,
                             isolation=isolation)
    click.echo(report.line())
    sys.exit(code)


def _slots(slots: int | None, threads: int | None, default: int) -> int:
    """--slots, or its old name --threads, or `default`; both given is a usage error."""
    if slots is not None and threads is not None:
        raise click.UsageError("give --slots only (--threads is its old name)")
    return slots if slots is not None else threads if threads is not None else default


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def workers(as_json: bool) -> None:
    """Live workers (heartbeat within 30 s), dead ones, queues with no live worker, and
    queues whose pending rows no live worker consumes.

    Exit status 1 when a handler's queue has no live worker or pending rows sit in a
    queue that no live worker consumes."""
    from ..worker.heartbeat import view  # lazy: CLI start-up time

    seen = view(_app())
    if as_json:
        click.echo(_dump({"live": seen.live, "dead": seen.dead, "unserved": seen.unserved,
                          "orphaned": seen.orphaned}))
    else:
        rows = [{"worker": r["id"], "state": "live" if r["live"] else "DEAD",
                 "status": r["status"], "queues": r["queues"], "jobs_done": r["jobs_done"],
                 "running": r["current_jobs"] or "", "last_seen": r["last_seen_at"],
                 "age_s": round(r["age_seconds"]), "started": r["started_at"]}
                for r in seen.live + seen.dead]
        if rows:
            _table(rows, list(rows[0]))
        else:
            click.echo("no workers have reported")
        for queue in seen.unserved:
            if queue not in seen.orphaned:
                click.echo(f"WARNING: queue {queue!r} has no live worker")
        for queue, info in seen.orphaned.items():
            click.echo(f"WARNING: queue {queue!r} has {info['pending']} pending row(s) "
                       f"({info['due']} due) and no live worker; start one with "
                       f"`cronjobs worker --queues {queue}`")
    sys.exit(0 if seen.ok else 1)


@main.command()
@click.option("--host", default=None, help="Listen address (default CRONJOBS_DASHBOARD_HOST).")
@click.option("--port", type=Integer(0, 65535), default=None,
              help="Port (default CRONJOBS_DASHBOARD_PORT; 0 picks a free one).")
@click.option("--slots", type=Integer(min=1), default=None,
              help="Jobs the worker runs at the same time, one job process each (default: 4).")
@click.option("--threads", type=Integer(min=1), default=None, deprecated="use --slots",
              help="The old name of --slots.")
@click.option("--shutdown-timeout", type=click.FloatRange(min=0), default=30, show_default=True,
              metavar="S", help="After SIGTERM, seconds running jobs may take to finish.")
def serve(host: str | None, port: int | None, slots: int | None, threads: int | None,
          shutdown_timeout: float) -> None:
    """Scheduler + worker + web front in one process (the embedded mode)."""
    from ..migrate import upgrade  # lazy: CLI start-up time
    from ..serve import serve as run
    from ..worker.loop import connections_needed

    slots = _slots(slots, threads, 4)
    app = _app(create=True, pool_size=connections_needed(slots))
    upgrade(app.engine)
    sys.exit(run(app, host or app.settings.dashboard.host,
                 app.settings.dashboard.port if port is None else port, slots,
                 shutdown_timeout=shutdown_timeout))
