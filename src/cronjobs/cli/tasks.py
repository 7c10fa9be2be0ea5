"""Scheduling commands: tick, scheduler, tasks (list, enable, disable, run)."""

from __future__ import annotations

import click

from .base import Group, _app, _parse_time, _table, main


@main.command()
@click.option("--now", help="Tick for this ISO 8601 instant instead of the clock (UTC if naive).")
def tick(now: str | None) -> None:
    """Start every due task once (for a system cron line `* * * * * cronjobs tick`)."""
    from ..scheduler import tick as do_tick

    report = do_tick(_parse_time(now, "--now"), app=_app())
    for task, slot, job_id in report.started:
        click.echo(f"started {task} slot {slot} as job {job_id}")
    for task, reason in sorted(report.skipped.items()):
        note = " (module not installed)" if reason == "unavailable" else ""
        click.echo(f"skipped {task}: {reason}{note}")


@main.command()
def scheduler() -> None:
    """Tick every minute (APScheduler) until SIGTERM/SIGINT."""
    from ..scheduler import run_forever
    from ..worker import Signals

    run_forever(_app(), Signals().install().stop)


@main.group(cls=Group, invoke_without_command=True)
@click.pass_context
def tasks(ctx: click.Context) -> None:
    """List tasks (default), or enable / disable / run one.

    A task whose handler is not available() shows "module not installed" and is not
    scheduled; a destructive task ships disabled."""
    if ctx.invoked_subcommand is None:
        from ..scheduler import task_infos
        from ..slots import describe
        from .handlers import available_text

        rows = [{"task": i.task, "type": i.type, "frequency": describe(i.frequency),
                 "enabled": i.enabled, "available": available_text(i.available),
                 "last_run_at": i.runtime["last_run_at"] or "",
                 "next_run_at": i.runtime["next_run_at"] or "",
                 "last_job": i.runtime["last_job_id"] or "",
                 "last_status": i.runtime["last_status"] or ""} for i in task_infos(_app())]
        _table(rows, list(rows[0]) if rows else ["task"])


@tasks.command("enable")
@click.argument("task")
def tasks_enable(task: str) -> None:
    """Turn TASK's kill switch on."""
    from ..scheduler import set_enabled

    set_enabled(task, True, app=_app())
    click.echo(f"{task}: enabled")


@tasks.command("disable")
@click.argument("task")
def tasks_disable(task: str) -> None:
    """Turn TASK's kill switch off (the scheduler skips it)."""
    from ..scheduler import set_enabled

    set_enabled(task, False, app=_app())
    click.echo(f"{task}: disabled")


@tasks.command("run")
@click.argument("task")
def tasks_run(task: str) -> None:
    """Dispatch TASK now (a manual run; the schedule does not move). Prints the row id."""
    from ..scheduler import run_task

    click.echo(run_task(task, app=_app()))
