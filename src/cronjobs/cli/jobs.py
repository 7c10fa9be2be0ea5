"""Row commands: dispatch, get, run, stop, recover-stale, cleanup."""

from __future__ import annotations

import json
import sys

import click
from click.core import ParameterSource

from .. import limits
from ..status import Ended, Status
from .base import JOB_ID, MAX_ATTEMPTS, PRIORITY, _app, _dump, _fail, _parse_time, main


@main.command()
@click.argument("job_type", required=False)
@click.option("--payload", default="{}", help="JSON object handed to handle().")
@click.option("--key", "idempotency_key", help="Idempotency key (unique over the table).")
@click.option("--parent", "parent_id", type=int, help="Parent row id.")
@click.option("--priority", type=PRIORITY, default=5, show_default=True,
              help="Lower runs first.")
@click.option("--at", "scheduled_at", help="Do not run before this ISO 8601 time (UTC if naive).")
@click.option("--expires-in", "expires_in", metavar="DURATION",
              help="Not started within this long (30s, 5m, 2h; counted from --at when "
                   "given, else now): the row ends expired, not run.")
@click.option("--expires-at", "expires_at", metavar="ISO",
              help="Not started by this ISO 8601 time (UTC if naive): the row ends expired, "
                   "not run.")
@click.option("--title", help="Up to 255 characters.")
@click.option("--max-attempts", type=MAX_ATTEMPTS,
              help="Override the handler's MAX_ATTEMPTS.")
@click.option("--depends-on", "depends_on", metavar="IDS",
              help="Comma-separated row ids (12,15): the job waits until they have finished "
                   "(a family root: its whole family); a failed one cancels it.")
@click.option("--allow-failed", is_flag=True,
              help="With --depends-on: run even when a dependency failed or was cancelled.")
@click.option("--callback-url", "callback_url", metavar="URL",
              help="An http(s) URL that receives each finished attempt of the row as a "
                   "signed JSON POST (docs/webhooks.md); wins over the handler's WEBHOOK_URL.")
@click.option("--remote", is_flag=True,
              help="JOB_TYPE is run by another codebase's workers: accept it although no "
                   "handler here knows it (as a type matching CRONJOBS_REMOTE_TYPES).")
@click.option("--stdin", "from_stdin", is_flag=True,
              help="Many jobs: one JSON object a line on standard input (see above); no "
                   "JOB_TYPE and none of the options above but --remote (for every line).")
@click.option("--quiet", "-q", is_flag=True,
              help="With --stdin: print the number of rows instead of their ids, and no "
                   "progress bar.")
@click.pass_context
def dispatch(ctx: click.Context, job_type: str | None, payload: str,
             idempotency_key: str | None, parent_id: int | None, priority: int,
             scheduled_at: str | None, expires_in: str | None, expires_at: str | None,
             title: str | None, max_attempts: int | None, depends_on: str | None,
             allow_failed: bool, callback_url: str | None, remote: bool, from_stdin: bool,
             quiet: bool) -> None:
    """Add a job of a registered JOB_TYPE (or, with --remote, of a type another codebase
    runs); prints its row id.

    With --stdin, many jobs: one JSON object a line on standard input. Only "type" is
    required; the other keys are the options below, by the names in this example:

    \b
      {"type": "acme.sync.execute", "payload": {"user": 7}, "key": "sync-7",
       "priority": 3, "at": "2030-01-01T09:00Z", "title": "Sync user 7",
       "parent": 12, "max_attempts": 5, "depends_on": [10, 11], "allow_failed": false,
       "expires_in": "30m", "callback_url": "https://acme.example/hooks/cron"}
    ("expires_at": an ISO 8601 time, instead of "expires_in".)

    Every line is checked first: a bad one (not JSON, not an object, an unknown key or
    type, a payload too big or nested too deeply, ...) ends the command with exit
    status 2 and one line naming its number, and nothing is inserted. Then the rows are
    inserted 1,000 per transaction and their ids printed one per line, in input order
    (a line whose key is taken gives the id of the row holding it); a progress bar shows
    on a terminal. Blank lines are skipped; a line is at most 2,000,000 bytes. A parent
    that does not exist is refused by its line before any insert too; only a parent
    deleted after that look stops its batch: that batch is not inserted, the batches
    before it are (their ids printed)."""
    if from_stdin:
        _refuse_with_stdin(ctx, job_type)
        from .stdin import dispatch_lines  # lazy: CLI start-up time

        if sys.stdin.isatty():
            click.echo("reading JSON lines from the terminal; end with Ctrl-D", err=True)
        dispatch_lines(_app(), click.get_binary_stream("stdin"), remote=remote, quiet=quiet)
        return
    if job_type is None:
        raise click.UsageError("Missing argument 'JOB_TYPE'.", ctx)
    if quiet:
        raise click.UsageError("--quiet goes with --stdin", ctx)
    if allow_failed and not depends_on:
        raise click.UsageError("--allow-failed goes with --depends-on", ctx)
    if expires_in is not None and expires_at is not None:
        raise click.UsageError("give --expires-in or --expires-at, not both", ctx)
    _dispatch_one(job_type, payload, idempotency_key=idempotency_key, parent_id=parent_id,
                  priority=priority, scheduled_at=scheduled_at, title=title,
                  max_attempts=max_attempts, remote=remote, callback_url=callback_url,
                  depends_on=_ids(depends_on), allow_failed=allow_failed,
                  expires_in=_duration(expires_in, "--expires-in"),
                  expires_at=_parse_time(expires_at, "--expires-at"))


def _duration(text: str | None, name: str) -> float | None:
    """A duration option (`30s`, `5m`) in seconds; None for None.

    Raises:
        click.BadParameter: not a duration, naming the option and the value.
    """
    if text is None:
        return None
    from ..durations import seconds  # lazy: CLI start-up time

    try:
        return seconds(text, name=name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from None


def _ids(text: str | None) -> list[int] | None:
    """`--depends-on 12,15` as `[12, 15]`.

    Raises:
        click.BadParameter: an item that is not a positive integer.
    """
    if text is None:
        return None
    items = [item.strip() for item in text.split(",") if item.strip()]
    bad = [item for item in items if not item.isdigit() or int(item) < 1]
    if bad or not items:
        raise click.BadParameter(f"must be row ids separated by commas (12,15), got {text!r:.80}",
                                 param_hint="--depends-on")
    return [int(item) for item in items]


def _refuse_with_stdin(ctx: click.Context, job_type: str | None) -> None:
    """A usage error for JOB_TYPE or a row option given with --stdin (each line has them)."""
    if job_type is not None:
        raise click.UsageError(f"with --stdin each line names its type; got JOB_TYPE "
                               f"{job_type!r} too", ctx)
    for param in ctx.command.params:
        if param.name in ("payload", "idempotency_key", "parent_id", "priority",
                          "scheduled_at", "title", "max_attempts", "depends_on",
                          "allow_failed", "expires_in", "expires_at", "callback_url") \
                and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE:
            raise click.UsageError(f"with --stdin each line carries its fields; "
                                   f"{param.opts[0]} cannot be given too", ctx)


def _dispatch_one(job_type: str, payload: str, *, remote: bool, scheduled_at: str | None,
                  **options) -> None:
    from .. import queue  # lazy: CLI start-up time

    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON ({exc.msg}): {payload!r:.200}",
                                 param_hint="--payload") from None
    except RecursionError:
        raise click.BadParameter(f"nested more than {limits.JSON_MAX_DEPTH} levels deep "
                                 f"(objects and arrays inside each other); the limit is "
                                 f"{limits.JSON_MAX_DEPTH}", param_hint="--payload") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"must be a JSON object like '{{\"key\": 1}}', got {payload!r}",
                                 param_hint="--payload")
    when = _parse_time(scheduled_at, "--at")
    app = _app()
    result = queue.submit(job_type, data, scheduled_at=when, known_type=not remote, app=app,
                          **options)
    click.echo(result.id)
    if not result.created:
        click.echo(f"note: key {options['idempotency_key']!r} already held by job {result.id} "
                   f"({result.status}); nothing new was added", err=True)


@main.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--columns", help="Comma-separated column names (default all).")
@click.option("--traceback", "traceback_only", is_flag=True,
              help="Print only the traceback of the row's last failure, as text (the error "
                   "on the first line, then the frames with file names and line numbers); "
                   "exit 1 when it has none.")
def get(job_id: int, columns: str | None, traceback_only: bool) -> None:
    """Print row JOB_ID as JSON, as stored (`traceback`: the last failure's, with file
    names and line numbers). `max_attempts` is null for a row dispatched without it until
    a worker claims the row: the handler that runs it decides."""
    from .. import queue  # lazy: CLI start-up time
    from ..errors import JobNotFound

    app = _app()
    if traceback_only and columns is not None:
        raise click.UsageError("--traceback prints one column; leave out --columns")
    cols = ["traceback"] if traceback_only else (
        None if columns is None else [c.strip() for c in columns.split(",")])
    row = queue.get(job_id, cols, app=app)
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    if traceback_only:
        if not row["traceback"]:
            _fail(f"job {job_id} has no traceback (its last run raised nothing)", 1)
        click.echo(row["traceback"].rstrip("\n"))
        return
    for key in ("payload", "result_payload"):
        if row.get(key):
            try:
                row[key] = json.loads(row[key])
            except (ValueError, RecursionError):  # stored as it came: shown as the text
                pass
    if row.get("status") == Status.WAITING:  # the dependencies it still waits for
        from ..family import depends  # lazy: CLI start-up time
        from ..store.db import run_in_transaction

        row["waiting_for"] = run_in_transaction(
            app.engine, lambda c: depends.waiting_for(c, [job_id])).get(job_id, [])
    click.echo(_dump(row))


@main.command()
@click.argument("job_id", type=JOB_ID)
def run(job_id: int) -> None:
    """Run pending row JOB_ID here and now (bypasses the worker). Exit 1 unless completed."""
    from ..job.executor import Executor  # lazy: CLI start-up time
    from ..job.inline import InlineRunner

    executor = Executor(_app())
    report = InlineRunner(executor).run_id(job_id)
    click.echo(f"job {report.id} ({report.type}): {report.status} in {report.duration_ms:.0f} ms")
    # A scheduled run's pings out (`job.pings`) go before the process ends.
    executor.pings.sender.flush(executor.pings.sender.timeout_seconds * 2)
    sys.exit(0 if report.status in (Status.COMPLETED, Ended.DELETED) else 1)


@main.command()
@click.argument("job_id", type=JOB_ID)
def stop(job_id: int) -> None:
    """Stop running row JOB_ID: its worker ends the job within a few seconds, the way
    MAX_RUNTIME does, and the row ends failed (reason `stopped`, not retried). The same
    action as the Workers page's Stop. Exit 2 when the row is not running."""
    from ..actions import operator  # lazy: CLI start-up time

    row = operator.stop(_app(), job_id, who="cli")
    click.echo(f"job {job_id}: stop requested (attempt {row['attempts']} on worker "
               f"{row['worker_id']}); its worker ends it within a few seconds")


@main.command("recover-stale")
@click.option("--minutes", type=float, default=None,
              help="Lease expired more than this long ago "
                   "(default CRONJOBS_RECOVER_STALE_MINUTES).")
def recover_stale(minutes: float | None) -> None:
    """Put running rows whose worker was lost back to pending (or failed)."""
    from .. import queue  # lazy: CLI start-up time

    click.echo(f"recovered {queue.recover_stale(minutes, app=_app())} row(s)")


@main.command()
@click.option("--dry-run", is_flag=True, help="Count, delete nothing.")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress bar (there is none when standard error is not a terminal).")
def cleanup(dry_run: bool, quiet: bool) -> None:
    """Delete finished rows older than their retention, in batches.

    Each batch is one transaction of at most CRONJOBS_CLEANUP_BATCH_SIZE rows per status;
    on a terminal a progress bar shows the rows deleted so far and the rate."""
    from .. import queue  # lazy: CLI start-up time
    from .progress import Progress  # lazy: CLI start-up time

    app = _app()
    with Progress("deleting old rows", quiet=quiet or dry_run) as bar:
        counts = queue.cleanup(dry_run=dry_run, app=app,
                               progress=lambda totals: bar.update(sum(totals.values())))
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
