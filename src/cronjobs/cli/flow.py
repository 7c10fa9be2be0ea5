"""Flow-control commands: pause, resume, unblock, limits."""

from __future__ import annotations

import click

from .. import durations
from ..errors import CronjobsError
from .base import Integer, _app, _dump, _table, main

MAX_PAUSE_SECONDS = durations.YEAR_SECONDS


def parse_duration(value: str) -> float:
    """`30`, `45s`, `30m`, `2h`, `1d` as seconds (> 0, at most a year).

    Raises:
        click.BadParameter: naming the value.
    """
    try:
        return durations.seconds(value, name="--for")
    except ValueError:
        raise click.BadParameter(f"must be a duration such as 90s, 30m, 2h or 1d (more than 0, "
                                 f"at most a year), got {value!r}", param_hint="--for") from None


def _target(queue: str | None, job_type: str | None, task: str | None) -> tuple[str, str]:
    given = [(s, n) for s, n in (("queue", queue), ("type", job_type), ("task", task))
             if n is not None]
    if len(given) != 1:
        raise click.UsageError("name exactly one of --queue, --type, --task")
    return given[0]


def _by() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"[:64]


TARGET_HELP = {
    "pause": ("A queue: none of its rows start.", "A job type: none of its rows start.",
              "A scheduled task: its scheduler slots are skipped (recorded as `paused`); "
              "a manual `cronjobs tasks run` still runs it."),
    "resume": ("The paused queue.", "The paused job type.", "The paused task."),
}


def _targets(verb: str):
    """The --queue / --type / --task options of `verb` (`pause` or `resume`)."""
    queue_help, type_help, task_help = TARGET_HELP[verb]

    def add(fn):
        fn = click.option("--task", help=task_help)(fn)
        fn = click.option("--type", "job_type", help=type_help)(fn)
        return click.option("--queue", help=queue_help)(fn)
    return add


def _warn_unknown(app, scope: str, name: str) -> None:
    """A pause of a name this process's handlers do not know still holds (another
    codebase's workers may run it), but a typo should not go unnoticed."""
    from ..actions.operator import unknown_target  # lazy: CLI start-up time

    warning = unknown_target(app, scope, name)
    if warning:
        click.echo(f"warning: {warning}", err=True)


@main.command()
@_targets("pause")
@click.option("--for", "duration", metavar="DURATION",
              help="End the pause by itself after this long (90s, 30m, 2h, 1d); default: "
                   "until `cronjobs resume`.")
@click.option("--reason", help="Why (shown by `cronjobs limits` and the dashboard).")
def pause(queue: str | None, job_type: str | None, task: str | None, duration: str | None,
          reason: str | None) -> None:
    """Pause a queue, a job type or a task on every worker and host: no row of it starts
    (running ones finish; a task: its scheduled slots are skipped); the rows keep their
    order and attempts. Pausing again replaces the pause (its end and reason)."""
    from datetime import timedelta

    from .. import store
    from ..limits import check_flow_reason
    from ..store.db import run_in_transaction

    scope, name = _target(queue, job_type, task)
    seconds = parse_duration(duration) if duration is not None else None
    check_flow_reason(reason)
    app = _app()

    def made_pause(conn):  # `--for` counts from the database's clock, as every host judges
        now = store.flow.flow_now(conn, app.clock)
        until = now + timedelta(seconds=seconds) if seconds is not None else None
        return store.pause(conn, scope, name, now=now, until=until, reason=reason, by=_by())

    made = run_in_transaction(app.engine, made_pause)
    ends = f"until {made['until']:%Y-%m-%d %H:%M:%S} UTC" if made["until"] else "until resumed"
    click.echo(f"paused {scope} {name} {ends}")
    _warn_unknown(app, scope, name)


@main.command()
@_targets("resume")
def resume(queue: str | None, job_type: str | None, task: str | None) -> None:
    """Lift the pause of a queue, a job type or a task; its rows start in their order."""
    from ..actions import operator  # lazy: CLI start-up time

    scope, name = _target(queue, job_type, task)
    lifted = operator.resume(_app(), scope, name)
    click.echo(f"resumed {scope} {name}" if lifted else f"{scope} {name} was not paused")


@main.command()
@click.argument("block_id", type=Integer(min=1, max=2**63 - 1), required=False)
@click.option("--type", "job_type", help="The blocked job type.")
@click.option("--key", help="The blocked limit key of --type (default: the block of the "
                            "whole type).")
def unblock(block_id: int | None, job_type: str | None, key: str | None) -> None:
    """Lift a block (a flood wait) before it ends: by its id (`cronjobs limits`; an id
    that names no live block is an error) or by --type and --key (none left: said, exit
    0, as `resume` of what is not paused)."""
    from ..actions import operator  # lazy: CLI start-up time

    if (block_id is None) == (job_type is None) or (key is not None and job_type is None):
        raise click.UsageError("give a block id, or --type (with --key for one key)")
    if job_type == "" or key == "":
        raise click.UsageError(f"--{'type' if job_type == '' else 'key'} must not be empty "
                               f"(omit --key to lift the block of the whole type)")
    count = operator.unblock(_app(), block_id, job_type=job_type, limit_key=key)
    what = f"block {block_id}" if block_id else f"block of {job_type}" + (
        f" key {key}" if key else "")
    if not count and block_id is not None:
        raise CronjobsError(f"no live block with id {block_id} (`cronjobs limits` lists them)")
    click.echo(f"lifted {what}" if count else f"no {what}")


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print pauses, blocks, limits and held rows as JSON; \"held\" counts the "
                   "held rows by reason: rate_limited, limited, paused, blocked.")
def limits(as_json: bool) -> None:
    """List the live pauses and blocks (who, when, why, until), the configured limits
    (handlers' CONCURRENCY / RATE_LIMIT / LIMIT_KEY, the [queues.<queue>] settings) and
    the due rows they hold now, per queue, type and reason: rate-limited (beyond the
    starts a rate limit admits now), limited (a full concurrency limit), paused, blocked."""
    from .. import store
    from ..flow.state import HELD_ORDER, held_now, held_totals, limit_text

    app = _app()
    now = app.clock.now()
    with app.engine.connect() as conn:
        now = store.flow.flow_now(conn, app.clock)  # what the claims judge with
        pauses, blocks = store.list_pauses(conn, now), store.list_blocks(conn, now)
        held = held_now(app, conn, now, pauses, blocks)
    configured = configured_limits(app)
    held_rows = [{"queue": h["queue"], "type": h["type"], "reason": h["reason"],
                  "rows": h["rows"], "capped": h["capped"], "oldest_due_at": h["oldest_due_at"],
                  "limits": [limit_text(lm, h["reason"]) for lm in h["limits"]]}
                 for h in sorted(held, key=lambda h: (HELD_ORDER.index(h["reason"]),
                                                      h["queue"], h["type"]))]
    if as_json:
        click.echo(_dump({"pauses": pauses, "blocks": blocks, "limits": configured,
                          "held": held_totals(held), "held_rows": held_rows}))
        return
    _section("pauses", [dict(p, until=_time(p["until"]) or "(until resumed)", created_at=_time(
        p["created_at"]), reason=p["reason"] or "") for p in pauses],
        ["scope", "name", "until", "created_by", "created_at", "reason"])
    _section("blocks", [dict(b, limit_key=b["limit_key"] or "(whole type)", until=_time(
        b["until"]), created_at=_time(b["created_at"]), reason=b["reason"] or "")
        for b in blocks], ["id", "type", "limit_key", "until", "created_at", "reason"])
    _section("limits", [{k: "" if v is None else v for k, v in row.items()} for row in configured],
             ["scope", "name", "concurrency", "rate_limit", "limit_key"])
    total = sum(h["rows"] for h in held_rows)
    click.echo(f"HELD: {total} due row(s)" if total else "HELD: none")
    if held_rows:
        _table([dict(h, reason=h["reason"].replace("_", "-"),
                     rows=f"{h['rows']}{'+' if h['capped'] else ''}",
                     oldest_due_at=_time(h["oldest_due_at"]), limits=", ".join(h["limits"]))
                for h in held_rows], ["queue", "type", "reason", "rows", "oldest_due_at", "limits"])


def configured_limits(app) -> list[dict]:
    """The limits in force: `{"scope": "type" | "queue", "name", "concurrency",
    "rate_limit" ("30/s" or None), "limit_key" (the field, "limit_key()" or None)}`; a
    type with a LIMIT_KEY alone too (it limits nothing, but its flood-wait blocks are per
    key), as `list-handlers` and the dashboard show it."""
    from ..flow.state import type_limits

    rows = [{"scope": "type", "name": t.type, "concurrency": t.concurrency,
             "rate_limit": t.rate_limit, "limit_key": t.limit_key}
            for t in type_limits(app) if t.limited or t.limit_key]
    for name, settings in sorted(app.settings.queues.items()):
        rows.append({"scope": "queue", "name": name, "concurrency": settings.concurrency,
                     "rate_limit": settings.rate_limit, "limit_key": None})
    return rows


def _section(title: str, rows: list[dict], columns: list[str]) -> None:
    click.echo(f"{title.upper()}: {len(rows) or 'none'}")
    if rows:
        _table(rows, columns)


def _time(value) -> str | None:
    return None if value is None else f"{value:%Y-%m-%d %H:%M:%S} UTC"
