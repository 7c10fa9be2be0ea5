"""The `cronjobs` command line. Bad input: one line on stderr, exit status 2, nothing written."""

from __future__ import annotations

import json
import sys
from datetime import datetime

import click

from .errors import CronjobsError, HandlerNotFound

EXIT_BAD_INPUT = 2
JOB_ID = click.IntRange(max=2**63 - 1)  # a BIGINT; a larger id is a usage error, not a crash


class Group(click.Group):
    """Turns bad input into one line `error: <message>` and exit status 2: our own
    `CronjobsError`s and click's usage errors alike. A database that cannot be reached
    is one line and exit status 1."""

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        from sqlalchemy.exc import DBAPIError

        try:
            return super().invoke(ctx)
        except CronjobsError as exc:
            _fail(str(exc), EXIT_BAD_INPUT)
        except DBAPIError as exc:
            text = str(exc.orig).splitlines()[0] if exc.orig else str(exc)
            if "no such table" in text or "doesn't exist" in text or "does not exist" in text:
                _fail(f"the database has no cronjobs tables ({text}); run `cronjobs migrate`",
                      EXIT_BAD_INPUT)
            _fail(f"database error: {text}", 1)

    def main(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        """Run the CLI; a usage error is printed as one line (no usage block)."""
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
            _fail(exc.format_message() + hint, EXIT_BAD_INPUT)
        except click.exceptions.Abort:
            _fail("aborted", 1)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _app(create: bool = False, database: bool = True):  # noqa: ANN202
    """The App. A command that uses the database needs an existing SQLite file unless it
    may `create` one (so a typo in the path or the wrong folder is an error, not a new
    empty database)."""
    from . import logs
    from .app import current
    from .errors import ConfigError

    app = current()
    logs.setup(app.settings.log_level)
    url = app.engine.url
    if database and url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        from pathlib import Path

        path = Path(url.database)
        if not create and not path.exists():
            raise ConfigError(f"database file {str(path.resolve())!r} does not exist; run "
                              f"`cronjobs migrate` first (CRONJOBS_DATABASE_URL={url})")
        if create and not path.parent.is_dir():
            raise ConfigError(f"folder of the database file does not exist: {str(path.parent)!r}")
    return app


def _registry(app):  # noqa: ANN001, ANN202
    return app.handlers


def _parse_time(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    from .clock import as_utc

    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"not an ISO 8601 time: {value!r}", param_hint=name) from None
    try:
        parsed = as_utc(parsed)
    except OverflowError:  # e.g. 0001-01-01T00:00+05:00 has no UTC datetime
        parsed = datetime.min
    if not datetime(1970, 1, 1) <= parsed < datetime(9999, 1, 1):
        raise click.BadParameter(f"out of range (1970 to 9998): {value!r}", param_hint=name)
    return parsed


def _dump(value) -> str:  # noqa: ANN001
    return json.dumps(value, indent=2, default=lambda v: v.isoformat() + "Z"
                      if isinstance(v, datetime) else str(v))


@click.group(cls=Group)
@click.version_option(package_name="cronjobs")
def main() -> None:
    """cronjobs: scheduled and background jobs from a database table.

    Settings come from CRONJOBS_* variables and an optional cronjobs.toml
    (CRONJOBS_DATABASE_URL, CRONJOBS_BROKER_URL, CRONJOBS_HANDLER_PATHS, CRONJOBS_TIMEZONE,
    CRONJOBS_DASHBOARD_TOKEN, CRONJOBS_CONFIG, ...).
    """


@main.command()
def migrate() -> None:
    """Create or upgrade the tables (Alembic, to the newest revision)."""
    from .migrate import current as revision, upgrade

    app = _app(create=True)
    upgrade(app.engine)
    click.echo(f"database at revision {revision(app.engine)} ({app.engine.url.render_as_string()})")


@main.command("list-handlers")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_handlers(as_json: bool) -> None:
    """Every registered handler: type, task, class, source, frequency, limits, available."""
    from .handler import task_name

    app = _app(database=False)
    registry = _registry(app)
    rows = []
    for job_type, cls in sorted(registry.registered_handlers().items()):
        rows.append({"type": job_type, "task": task_name(job_type),
                     "class": registry.class_name(cls),
                     "source": registry.handler_source(job_type) or "",
                     "frequency": cls.FREQUENCY or "", "max_attempts": cls.MAX_ATTEMPTS,
                     "max_runtime": cls.MAX_RUNTIME, "queue": cls.QUEUE or app.settings.default_queue,
                     "available": bool(cls.available())})
    if as_json:
        click.echo(_dump(rows))
        return
    _table(rows, ["type", "task", "class", "source", "frequency", "max_attempts", "max_runtime",
                  "available"])


def _table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in columns}
    click.echo("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for row in rows:
        click.echo("  ".join(str(row[c]).ljust(widths[c]) for c in columns))


@main.command()
@click.argument("job_type")
@click.option("--payload", default="{}", help="JSON object handed to handle().")
@click.option("--key", "idempotency_key", help="Idempotency key (unique over the table).")
@click.option("--parent", "parent_id", type=int, help="Parent row id.")
@click.option("--priority", type=int, default=5, show_default=True, help="Lower runs first.")
@click.option("--at", "scheduled_at", help="Do not run before this ISO 8601 time (UTC if naive).")
@click.option("--title", help="Up to 255 characters.")
@click.option("--max-attempts", type=int, help="Override the handler's MAX_ATTEMPTS (>= 1).")
def dispatch(job_type: str, payload: str, idempotency_key: str | None, parent_id: int | None,
             priority: int, scheduled_at: str | None, title: str | None,
             max_attempts: int | None) -> None:
    """Add a job of a registered JOB_TYPE; prints its row id."""
    from . import queue

    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON ({exc.msg}): {payload!r}",
                                 param_hint="--payload") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"must be a JSON object like '{{\"key\": 1}}', got {payload!r}",
                                 param_hint="--payload")
    when = _parse_time(scheduled_at, "--at")
    app = _app()
    if _registry(app).resolve_handler(job_type) is None:
        raise HandlerNotFound(f"unknown job type {job_type!r}; see `cronjobs list-handlers`")
    result = queue.submit(job_type, data, idempotency_key=idempotency_key, parent_id=parent_id,
                          priority=priority, scheduled_at=when, title=title,
                          max_attempts=max_attempts, app=app)
    click.echo(result.id)
    if not result.created:
        click.echo(f"note: key {idempotency_key!r} already held by job {result.id} "
                   f"({result.status}); nothing new was added", err=True)


@main.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--columns", help="Comma-separated column names (default all).")
def get(job_id: int, columns: str | None) -> None:
    """Print row JOB_ID as JSON."""
    from . import queue
    from .errors import JobNotFound

    cols = [c.strip() for c in columns.split(",")] if columns else None
    row = queue.get(job_id, cols, app=_app())
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    for key in ("payload", "result_payload"):
        if row.get(key):
            row[key] = json.loads(row[key])
    click.echo(_dump(row))


@main.command()
@click.argument("job_id", type=JOB_ID)
def run(job_id: int) -> None:
    """Run pending row JOB_ID here and now (bypasses the worker). Exit 1 unless completed."""
    app = _app()
    report = app.executor.run_id(job_id)
    click.echo(f"job {report.id} ({report.type}): {report.status} in {report.duration_ms:.0f} ms")
    sys.exit(0 if report.status in ("completed", "deleted") else 1)


@main.command()
@click.option("--now", help="Tick for this ISO 8601 instant instead of the clock (UTC if naive).")
def tick(now: str | None) -> None:
    """Start every due task once (for a system cron line `* * * * * cronjobs tick`)."""
    from .scheduler import tick as do_tick

    report = do_tick(_parse_time(now, "--now"), app=_app())
    for task, slot, job_id in report.started:
        click.echo(f"started {task} slot {slot} as job {job_id}")
    for task, reason in sorted(report.skipped.items()):
        click.echo(f"skipped {task}: {reason}")


@main.command()
def scheduler() -> None:
    """Tick every minute (APScheduler) until SIGTERM/SIGINT."""
    from .scheduler import run_forever
    from .worker import Signals

    run_forever(_app(), Signals().install().stop)


@main.command()
@click.option("--queues", help="Comma-separated queues (default: every handler's queue).")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=8, show_default=True,
              help="Jobs run at the same time per process (one job process each).")
@click.option("--max-jobs", type=click.IntRange(min=1), help="Recycle after this many jobs.")
@click.option("--memory-limit", type=click.FloatRange(min=1), metavar="MB",
              help="Recycle when the process and its job processes use this much memory.")
@click.option("--time-limit", type=click.FloatRange(min=1), metavar="S",
              help="Recycle after this many seconds.")
@click.option("--shutdown-timeout", type=click.FloatRange(min=0), default=30, show_default=True,
              metavar="S", help="After SIGTERM, seconds running jobs may take to finish.")
@click.option("--log-dir", type=click.Path(file_okay=False),
              help="Also log to DIR/workers-YYYY-MM-DD.log (default CRONJOBS_LOG_DIR).")
@click.option("--prefetch", type=click.IntRange(min=1),
              help="Messages held per queue (default: --threads; raise for many short jobs).")
def worker(queues: str | None, processes: int, threads: int, max_jobs: int | None,
           memory_limit: float | None, time_limit: float | None, shutdown_timeout: float,
           log_dir: str | None, prefetch: int | None) -> None:
    """Consume queues with Dramatiq until SIGTERM/SIGINT or a recycling limit (exit 0)."""
    from . import logs
    from .worker import Limits, run_children, run_worker

    app = _app()
    logs.add_daily_file(log_dir or app.settings.log_dir)
    names = app.queues() if queues is None else [q.strip() for q in queues.split(",") if q.strip()]
    if not names:
        raise click.BadParameter(f"no queue names in {queues!r}", param_hint="--queues")
    for name in set(names) - set(app.queues()):
        click.echo(f"warning: no registered handler uses queue {name!r}", err=True)
    if processes > 1:
        argv = ["worker", "--queues", ",".join(names), "--threads", str(threads),
                "--shutdown-timeout", str(shutdown_timeout)]
        for flag, value in (("--max-jobs", max_jobs), ("--memory-limit", memory_limit),
                            ("--time-limit", time_limit), ("--log-dir", log_dir),
                            ("--prefetch", prefetch)):
            if value is not None:
                argv += [flag, str(value)]
        sys.exit(run_children(argv, processes))
    limits = Limits(max_jobs=max_jobs, memory_mb=memory_limit, time_seconds=time_limit)
    sys.exit(run_worker(app, names, threads, limits=limits, shutdown_timeout=shutdown_timeout,
                        prefetch=prefetch))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def workers(as_json: bool) -> None:
    """Live workers (heartbeat within 30 s), dead ones, and queues with no live worker.

    Exit status 1 when a queue has no live worker."""
    from .heartbeat import view

    seen = view(_app())
    if as_json:
        click.echo(_dump({"live": seen.live, "dead": seen.dead, "unserved": seen.unserved}))
    else:
        rows = [{"worker": r["id"], "state": "live" if r in seen.live else "DEAD",
                 "status": r["status"], "queues": r["queues"], "jobs_done": r["jobs_done"],
                 "running": r["current_jobs"] or "", "last_seen": r["last_seen_at"],
                 "started": r["started_at"]} for r in seen.live + seen.dead]
        if rows:
            _table(rows, list(rows[0]))
        else:
            click.echo("no workers have reported")
        for queue in seen.unserved:
            click.echo(f"WARNING: queue {queue!r} has no live worker")
    sys.exit(1 if seen.unserved else 0)


@main.command()
@click.option("--host", default=None, help="Listen address (default CRONJOBS_DASHBOARD_HOST).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port (default CRONJOBS_DASHBOARD_PORT; 0 picks a free one).")
@click.option("--threads", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--shutdown-timeout", type=click.FloatRange(min=0), default=30, show_default=True,
              metavar="S", help="After SIGTERM, seconds running jobs may take to finish.")
def serve(host: str | None, port: int | None, threads: int, shutdown_timeout: float) -> None:
    """Scheduler + worker + web front in one process (the embedded mode)."""
    from .migrate import upgrade
    from .serve import serve as run

    app = _app(create=True)
    upgrade(app.engine)
    sys.exit(run(app, host or app.settings.dashboard_host,
                 app.settings.dashboard_port if port is None else port, threads,
                 shutdown_timeout=shutdown_timeout))


@main.command("recover-stale")
@click.option("--minutes", type=float, default=None,
              help="Lease expired more than this long ago (default CRONJOBS_RECOVER_STALE_MINUTES).")
def recover_stale(minutes: float | None) -> None:
    """Put running rows whose worker was lost back to pending (or failed)."""
    from . import queue

    click.echo(f"recovered {queue.recover_stale(minutes, app=_app())} row(s)")


@main.command()
@click.option("--dry-run", is_flag=True, help="Count, delete nothing.")
def cleanup(dry_run: bool) -> None:
    """Delete finished rows older than their retention, in batches."""
    from . import queue

    counts = queue.cleanup(dry_run=dry_run, app=_app())
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


@main.group(cls=Group, invoke_without_command=True)
@click.pass_context
def tasks(ctx: click.Context) -> None:
    """List tasks (default), or enable / disable / run one."""
    if ctx.invoked_subcommand is None:
        from .scheduler import task_infos

        rows = [{"task": i.task, "type": i.type, "frequency": i.frequency or "",
                 "enabled": i.enabled, "available": i.available,
                 "last_run_at": i.runtime["last_run_at"] or "",
                 "next_run_at": i.runtime["next_run_at"] or "",
                 "last_job": i.runtime["last_job_id"] or "",
                 "last_status": i.runtime["last_status"] or ""} for i in task_infos(_app())]
        _table(rows, list(rows[0]) if rows else ["task"])


@tasks.command("enable")
@click.argument("task")
def tasks_enable(task: str) -> None:
    """Turn TASK's kill switch on."""
    from .scheduler import set_enabled

    set_enabled(task, True, app=_app())
    click.echo(f"{task}: enabled")


@tasks.command("disable")
@click.argument("task")
def tasks_disable(task: str) -> None:
    """Turn TASK's kill switch off (the scheduler skips it)."""
    from .scheduler import set_enabled

    set_enabled(task, False, app=_app())
    click.echo(f"{task}: disabled")


@tasks.command("run")
@click.argument("task")
def tasks_run(task: str) -> None:
    """Dispatch TASK now (a manual run; the schedule does not move). Prints the row id."""
    from .scheduler import run_task

    click.echo(run_task(task, app=_app()))
