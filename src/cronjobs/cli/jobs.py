"""Row commands: dispatch, get, run, recover-stale, cleanup."""

from __future__ import annotations

import json
import sys

import click

from .. import limits
from ..status import Ended, Status
from .base import JOB_ID, _app, _dump, _parse_time, main


@main.command()
@click.argument("job_type")
@click.option("--payload", default="{}", help="JSON object handed to handle().")
@click.option("--key", "idempotency_key", help="Idempotency key (unique over the table).")
@click.option("--parent", "parent_id", type=int, help="Parent row id.")
@click.option("--priority", type=int, default=5, show_default=True, help="Lower runs first.")
@click.option("--at", "scheduled_at", help="Do not run before this ISO 8601 time (UTC if naive).")
@click.option("--title", help="Up to 255 characters.")
@click.option("--max-attempts", type=int, help="Override the handler's MAX_ATTEMPTS (>= 1).")
@click.option("--remote", is_flag=True,
              help="JOB_TYPE is run by another codebase's workers: accept it although no "
                   "handler here knows it (as a type matching CRONJOBS_REMOTE_TYPES).")
def dispatch(job_type: str, payload: str, idempotency_key: str | None, parent_id: int | None,
             priority: int, scheduled_at: str | None, title: str | None,
             max_attempts: int | None, remote: bool) -> None:
    """Add a job of a registered JOB_TYPE (or, with --remote, of a type another codebase
    runs); prints its row id."""
    from .. import queue

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
    result = queue.submit(job_type, data, idempotency_key=idempotency_key, parent_id=parent_id,
                          priority=priority, scheduled_at=when, title=title,
                          max_attempts=max_attempts, known_type=not remote, app=app)
    click.echo(result.id)
    if not result.created:
        click.echo(f"note: key {idempotency_key!r} already held by job {result.id} "
                   f"({result.status}); nothing new was added", err=True)


@main.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--columns", help="Comma-separated column names (default all).")
def get(job_id: int, columns: str | None) -> None:
    """Print row JOB_ID as JSON."""
    from .. import queue
    from ..errors import JobNotFound

    cols = [c.strip() for c in columns.split(",")] if columns else None
    row = queue.get(job_id, cols, app=_app())
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    for key in ("payload", "result_payload"):
        if row.get(key):
            try:
                row[key] = json.loads(row[key])
            except (ValueError, RecursionError):  # stored as it came: shown as the text
                pass
    click.echo(_dump(row))


@main.command()
@click.argument("job_id", type=JOB_ID)
def run(job_id: int) -> None:
    """Run pending row JOB_ID here and now (bypasses the worker). Exit 1 unless completed."""
    from ..executor import Executor

    report = Executor(_app()).run_id(job_id)
    click.echo(f"job {report.id} ({report.type}): {report.status} in {report.duration_ms:.0f} ms")
    sys.exit(0 if report.status in (Status.COMPLETED, Ended.DELETED) else 1)


@main.command("recover-stale")
@click.option("--minutes", type=float, default=None,
              help="Lease expired more than this long ago "
                   "(default CRONJOBS_RECOVER_STALE_MINUTES).")
def recover_stale(minutes: float | None) -> None:
    """Put running rows whose worker was lost back to pending (or failed)."""
    from .. import queue

    click.echo(f"recovered {queue.recover_stale(minutes, app=_app())} row(s)")


@main.command()
@click.option("--dry-run", is_flag=True, help="Count, delete nothing.")
def cleanup(dry_run: bool) -> None:
    """Delete finished rows older than their retention, in batches."""
    from .. import queue

    counts = queue.cleanup(dry_run=dry_run, app=_app())
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
