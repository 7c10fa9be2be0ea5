"""`cronjobs schedules`: the schedule entries of handlers (`SCHEDULES`) and those stored at
run time: list, add, edit, pause, resume, rm. An entry `<task>:<name>` is a task of its
own; pausing it is the flow pause of that task (`cronjobs pause --task TASK:NAME`)."""

from __future__ import annotations

import click

from .. import limits
from ..errors import InvalidJob
from .base import Group, _app, _dump, _table, main
from .flow import _by

LIST_OPTIONAL = ["payload", "timezone", "source", "paused"]


def _payload(text: str | None) -> dict | None:
    """`--payload`: a JSON object, or None when not given."""
    import json  # lazy: CLI start-up time

    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidJob(f"--payload is not valid JSON: {exc} (got {text[:60]!r})") from None
    except RecursionError:
        raise InvalidJob(f"--payload is nested more than {limits.JSON_MAX_DEPTH} levels deep; "
                         f"the limit is {limits.JSON_MAX_DEPTH}") from None
    if not isinstance(value, dict):
        raise InvalidJob(f'--payload must be a JSON object ({{"key": "value"}}), got '
                         f"{text[:60]!r}")
    return value


@main.group(cls=Group, invoke_without_command=True)
@click.pass_context
def schedules(ctx: click.Context) -> None:
    """Schedule entries: a handler's SCHEDULES (code) and entries stored at run time
    (database), each a task TASK:NAME of its own with its own slots, payload, pause and
    history. Without a subcommand: `schedules list`."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(schedules_list)


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def schedules_list(as_json: bool = False) -> None:
    """List every entry: TASK (TASK:NAME), CRON, TIMEZONE (the zone its cron line is read
    in), PAYLOAD, SOURCE (code or database), PAUSED and NEXT_RUN_AT (UTC)."""
    import json  # lazy: CLI start-up time

    from ..schedule.entries import listing  # lazy: CLI start-up time

    found = listing(_app())
    if as_json:
        click.echo(_dump(found))
        return
    rows = [{"task": r["task"], "cron": r["cron"], "timezone": r["timezone"],
             "payload": json.dumps(r["payload"], ensure_ascii=False), "source": r["source"],
             "paused": "yes" if r["paused"] else "",
             "next_run_at": f"{r['next_run_at']:%Y-%m-%d %H:%M}" if r["next_run_at"] else ""}
            for r in found]
    if not rows:
        click.echo("no schedule entries (add one: cronjobs schedules add TASK NAME --cron ...)")
        return
    _table(rows, list(rows[0]), LIST_OPTIONAL, ("task", "cron"), False)


@schedules.command("add")
@click.argument("task")
@click.argument("name")
@click.option("--cron", required=True, help='Its schedule: a cron line ("0 9 * * *"), a '
                                            "macro (@daily) or minute, hour, day, month.")
@click.option("--timezone", help="The IANA zone its cron line is read in (default: the "
                                 "handler's TIMEZONE, else the settings' timezone).")
@click.option("--payload", help="A JSON object; each scheduled run gets it with slot and "
                                "schedule added.")
def schedules_add(task: str, name: str, cron: str, timezone: str | None,
                  payload: str | None) -> None:
    """Store entry NAME of TASK's handler: the task TASK:NAME, started from the next tick.
    Bad input (unknown task, name, cron line, zone, payload; a name taken): one line,
    exit 2, nothing written."""
    from ..schedule import entries  # lazy: CLI start-up time

    value = _payload(payload)
    entry = entries.add(_app(), task, name, cron, timezone=timezone, payload=value, by=_by())
    click.echo(f"added {entry.entry_task}: {cron}"
               + (f" ({timezone})" if timezone else ""))


@schedules.command("edit")
@click.argument("spec", metavar="TASK:NAME")
@click.option("--cron", required=True, help="Its new schedule.")
@click.option("--timezone", help="Its zone (default: the handler's or the settings').")
@click.option("--payload", help="Its new payload, a JSON object (default: {}).")
def schedules_edit(spec: str, cron: str, timezone: str | None, payload: str | None) -> None:
    """Change a stored entry's cron line, zone and payload (a code entry: change the
    handler's SCHEDULES)."""
    from ..schedule import entries  # lazy: CLI start-up time

    entry = entries.update(_app(), spec, cron, timezone=timezone, payload=_payload(payload))
    click.echo(f"changed {entry.entry_task}: {cron}" + (f" ({timezone})" if timezone else ""))


@schedules.command("pause")
@click.argument("spec", metavar="TASK:NAME")
@click.option("--reason", help="Why (shown by `cronjobs limits` and the dashboard).")
def schedules_pause(spec: str, reason: str | None) -> None:
    """Pause an entry: its slots are skipped (recorded as paused) until resumed; the same
    as `cronjobs pause --task TASK:NAME`."""
    from ..limits import check_flow_reason  # lazy: CLI start-up time
    from ..schedule import entries

    check_flow_reason(reason)
    entry = entries.pause(_app(), spec, by=_by(), reason=reason)
    click.echo(f"paused {entry.entry_task}")


@schedules.command("resume")
@click.argument("spec", metavar="TASK:NAME")
def schedules_resume(spec: str) -> None:
    """Lift an entry's pause: its next slot starts."""
    from ..schedule import entries  # lazy: CLI start-up time

    lifted = entries.resume(_app(), spec)
    click.echo(f"resumed {spec}" if lifted else f"{spec} was not paused")


@schedules.command("rm")
@click.argument("spec", metavar="TASK:NAME")
def schedules_rm(spec: str) -> None:
    """Remove a stored entry: its future slots stop; its runs and runtime row (history)
    stay. A code entry (the handler's SCHEDULES) cannot be removed here."""
    from ..schedule import entries  # lazy: CLI start-up time

    entry = entries.remove(_app(), spec)
    click.echo(f"removed {entry.entry_task}")
