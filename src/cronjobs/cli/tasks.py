"""Scheduling commands: tick, scheduler, tasks (list, enable, disable, run), ping."""

from __future__ import annotations

import sys

import click

from .base import WIDE, Group, _app, _dump, _parse_time, _table, main


@main.command()
@click.option("--now", help="Tick for this ISO 8601 instant instead of the clock (UTC if "
                            "naive). A future instant records its slots as run: those "
                            "tasks start again only once the clock passes it (use a copy "
                            "of the database to try one).")
def tick(now: str | None) -> None:
    """Start every due task once (for a system cron line `* * * * * cronjobs tick`).

    Exit status 1 when a task's slot could not be started (`skipped TASK: error (...)`;
    the other tasks' slots start all the same), 2 when a handler is invalid."""
    from ..schedule.scheduler import tick as do_tick  # lazy: CLI start-up time

    at = _parse_time(now, "--now")
    app = _app()
    if at is not None and (ahead := (at - app.clock.now()).total_seconds()) >= 60:
        span = (f"{ahead / 86400:,.0f} days" if ahead >= 2 * 86400 else
                f"{ahead / 3600:.1f} hours" if ahead >= 7200 else f"{ahead / 60:.0f} minutes")
        click.echo(f"warning: --now is {span} ahead of the clock: the "
                   f"slots it starts are recorded as run, and those tasks start again only "
                   f"once the clock passes {at:%Y-%m-%d %H:%M} UTC", err=True)
    report = do_tick(at, app=app)
    for task, slot, job_id in report.started:
        click.echo(f"started {task} slot {slot} as job {job_id}")
    for task, reason in sorted(report.skipped.items()):
        if task in report.buffered:
            click.echo(f"buffered {task}: its slot starts when the previous run is done")
            continue
        note = {"unavailable": " (module not installed)",
                "buffered": " (a buffered slot waits already)",
                "missed": " (its slot began too long ago for its CATCHUP)"}.get(reason, "")
        if task in report.errors:
            note = f" ({report.errors[task]})"
        click.echo(f"skipped {task}: {reason}{note}")
    if report.errors:
        sys.exit(1)


@main.command()
def scheduler() -> None:
    """Tick every minute (APScheduler) until SIGTERM/SIGINT.

    Refused (exit 2, the line `cronjobs worker` and `cronjobs tick` give) when a handler is
    invalid. SIGTERM lets a running tick end and stops ("scheduler: stopping; no new
    ticks")."""
    import logging  # lazy: CLI start-up time

    from ..schedule.service import run_forever
    from ..worker.loop import Signals

    app = _app()
    app.handlers.load()  # a bad handler: one line and exit 2 before anything starts
    signals = Signals("scheduler: stopping; no new ticks",
                      logging.getLogger("cronjobs.schedule.scheduler"), urgent=None)
    run_forever(app, signals.install().stop)


# `cronjobs tasks` on a terminal narrower than its table: TASK, FREQUENCY, ENABLED,
# LAST_STATUS and NEXT_RUN_AT stay; these are added, the most wanted first, while they fit.
TASKS_OPTIONAL = ["skip_reason", "last_run_at", "family", "available", "limits", "paused",
                  "skipped", "overlap", "last_job", "last_skipped", "buffered", "manual_status",
                  "last_manual_at", "manual_job", "type", "source", "after", "zone"]


@main.group(cls=Group, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@WIDE
@click.pass_context
def tasks(ctx: click.Context, as_json: bool, wide: bool) -> None:
    """List tasks (default), or enable / disable / run one.

    LAST_RUN_AT, LAST_JOB, LAST_STATUS are the last scheduled run; LAST_MANUAL_AT,
    MANUAL_JOB, MANUAL_STATUS the last manual run. A frequency ending in * is overridden
    by the settings. OVERLAP is the handler's policy while its last run is still going;
    SKIPPED counts slots that started nothing, LAST_SKIPPED and SKIP_REASON (running,
    buffered, paused, error, missed) name the last; BUFFERED is the slot a buffer_one task
    keeps waiting.
    LIMITS are its types' CONCURRENCY / RATE_LIMIT / LIMIT_KEY; PAUSED names the live
    pauses that hold it (`cronjobs pause`). FAMILY is the last scheduled run's family:
    "200 children: 176 ok, 24 failed (13 timeouts) — 9.2 s — callback completed".
    NEXT_RUN_AT is the next run that will start (never in the past; with the task's
    SPREAD/JITTER offset) as wall time in the task's zone, named by ZONE; `idle` for a
    task with nothing to do now (AVAILABLE says why: `idle: no URLs to check ...`). On a
    terminal the table fits its width (--wide: every column)."""
    if ctx.invoked_subcommand is None:
        from ..schedule.taskrows import cli_row, task_rows  # lazy: CLI start-up time

        found = task_rows(_app())
        if as_json:
            click.echo(_dump([r.as_dict() for r in found]))
            return
        rows = [cli_row(r) for r in found]
        _table(rows, list(rows[0]) if rows else ["task"], TASKS_OPTIONAL if rows else None,
               ("task", "frequency", "queue"), wide)


@tasks.command("enable")
@click.argument("task")
def tasks_enable(task: str) -> None:
    """Turn TASK's kill switch on."""
    from ..schedule.tasks import set_enabled  # lazy: CLI start-up time

    set_enabled(task, True, app=_app())
    click.echo(f"{task}: enabled")


@tasks.command("disable")
@click.argument("task")
def tasks_disable(task: str) -> None:
    """Turn TASK's kill switch off (the scheduler skips it)."""
    from ..schedule.tasks import set_enabled  # lazy: CLI start-up time

    set_enabled(task, False, app=_app())
    click.echo(f"{task}: disabled")


@tasks.command("run")
@click.argument("task")
@click.option("--again", is_flag=True,
              help="Start another run even while a manual run of TASK is still pending.")
@click.option("--force", is_flag=True,
              help="Start it even while TASK's scheduled run is still going (OVERLAP skip).")
def tasks_run(task: str, again: bool, force: bool) -> None:
    """Dispatch TASK now at priority 1 (a manual run; the schedule does not move).

    Prints the row id. Refused (exit 2, naming its id) while a manual run of TASK is
    still pending, unless --again; while its scheduled run (or a row of that run's
    family) is pending or running and its OVERLAP is skip, unless --force (logged);
    refused for a disabled or unavailable task."""
    from ..schedule.manual import run_now  # lazy: CLI start-up time

    click.echo(run_now(task, again=again, force=force, app=_app()).id)


@main.command()
@click.argument("task")
@click.option("--from", "start", required=True,
              help="The first instant of the range, ISO 8601 (UTC if naive): slots that "
                   "begin at or after it.")
@click.option("--to", "end", required=True,
              help="The last instant of the range, ISO 8601 (UTC if naive): slots that "
                   "begin at or before it.")
@click.option("--dry-run", is_flag=True, help="Print the slots it would make (key and UTC "
                                              "time) and write nothing.")
def backfill(task: str, start: str, end: str, dry_run: bool) -> None:
    """Make one row per slot of TASK that begins from --from to --to (both inclusive).

    Prints the row ids one per line, in slot order. Idempotent: a slot that already ran
    (by the scheduler or an earlier backfill) prints its existing row id and makes
    nothing; the scheduler never starts a backfilled slot again. Cron lines are read in
    the task's zone. Unless the task's OVERLAP is allow, each new row waits for the one
    before, so they run one at a time; limits and pauses hold them as any row. Refused
    (exit 2): an unknown task, a task without a frequency, --to before --from, a range of
    more than 10,000 slots."""
    from ..schedule.backfill import backfill as do_backfill  # lazy: CLI start-up time

    first, last = _parse_time(start, "--from"), _parse_time(end, "--to")
    done = do_backfill(task, first, last, dry_run=dry_run, app=_app())
    for slot in done:
        if not dry_run:
            click.echo(slot.job_id)
        elif slot.job_id is None:
            click.echo(f"cronjobs:{task}:{slot.key} {slot.at:%Y-%m-%d %H:%M} UTC")
        else:
            click.echo(f"cronjobs:{task}:{slot.key} {slot.at:%Y-%m-%d %H:%M} UTC "
                       f"(ran already: job {slot.job_id})")


@main.command()
@click.argument("task")
@click.option("--start", "kind", flag_value="start",
              help="The run starts: open a running row (end it with a later ping).")
@click.option("--fail", "kind", flag_value="fail",
              help="The run failed: end the open row (or write one) as failed.")
@click.option("--message", default=None,
              help="The run's output or error text, kept with the row (cut to 16,000 bytes).")
def ping(task: str, kind: str | None, message: str | None) -> None:
    """Record a run of TASK that runs elsewhere, e.g. in a system crontab
    (`0 3 * * * backup.sh && cronjobs ping nightly-backup`): without a flag it succeeded.

    TASK is a registered task or one declared as `[tasks.TASK]` with a frequency in the
    settings; its row gets the same history, last success and overdue check as a
    scheduled run. Prints the row id and status. Exit 2 for an unknown task."""
    from ..schedule.pingin import ping as record  # lazy: CLI start-up time

    run = record(_app(), task, kind or "success", message)
    click.echo(f"{task}: job {run.id} {run.status}")
