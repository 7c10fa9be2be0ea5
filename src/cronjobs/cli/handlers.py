"""`cronjobs migrate` and `cronjobs list-handlers`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from .base import WIDE, _app, _dump, _table, main


@main.command()
@click.option("--quiet", "-q", is_flag=True,
              help="No progress bar and no log line per revision; only the final line.")
def migrate(quiet: bool) -> None:
    """Create or upgrade the tables (Alembic, to the newest revision).

    On a terminal a progress bar counts the revisions applied (revision N of M) instead of
    a log line each."""
    from ..migrate import current as revision  # lazy: CLI start-up time (Alembic)
    from ..migrate import pending, upgrade
    from .progress import Progress  # lazy: CLI start-up time

    app = _app(create=True)
    with _alembic_quiet(True):  # our look at what is to do is no step of the migration
        todo = pending(app.engine)
    with Progress("migrating", total=len(todo), unit="revisions", quiet=quiet or not todo,
                  describe=_revision_text) as bar, _alembic_quiet(quiet or bar.shown):
        upgrade(app.engine, on_revision=lambda rev: bar.update(bar.done + 1, note=rev))
        at = revision(app.engine)
    click.echo(f"database at revision {at} ({app.engine.url.render_as_string()})")


def _revision_text(bar) -> str:
    """`revision 3 of 6 (0003)` for the migrate progress bar."""
    return f"revision {bar.done} of {bar.total}" + (f" ({bar.note})" if bar.note else "")


@contextmanager
def _alembic_quiet(quiet: bool) -> Iterator[None]:
    """Alembic's INFO lines (one per revision) off while `quiet` (its warnings stay)."""
    import logging  # lazy: CLI start-up time (`cronjobs --help` needs no logging)

    logger = logging.getLogger("alembic")
    level = logger.level
    if quiet:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


# `list-handlers` on a terminal narrower than its table: TYPE, FREQUENCY, QUEUE, LIMITS
# and AVAILABLE stay; these are added, the most wanted first, while they fit.
HANDLERS_OPTIONAL = ["task", "max_runtime", "max_attempts", "source", "class"]


@main.command("list-handlers")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@WIDE
def list_handlers(as_json: bool, wide: bool) -> None:
    """Every registered handler: type, task, class, source, frequency, queue, attempts and
    runtime, flow-control limits, available.

    A cron macro is shown with its expansion (`@daily (0 0 * * *)`); the limits in words
    ("at most 2 running, 30/s per chat_id"; `--json`: `concurrency`, `rate_limit`,
    `limit_key`, and `dispatch_scope`: the token scope POST /api/jobs needs); a handler
    whose available() is False shows "module not installed" (its task is not scheduled).
    On a terminal the table fits its width (--wide: every column)."""
    from registry import class_name  # lazy: CLI start-up time

    from ..flow.state import type_limits  # lazy: CLI start-up time
    from ..schedule.slots import describe, expand
    from ..schedule.taskrows import type_limits_text

    app = _app(database=False)
    registry = app.handlers
    classes = registry.registered_handlers()
    rows = []
    for flow in type_limits(app):
        cls = classes[flow.type]
        rows.append({"type": flow.type, "task": flow.task, "class": class_name(cls),
                     "source": registry.handler_source(flow.type) or "",
                     "frequency": cls.FREQUENCY or "",
                     "expanded_frequency": expand(cls.FREQUENCY) if cls.FREQUENCY else "",
                     "max_attempts": cls.MAX_ATTEMPTS,
                     "max_runtime": cls.MAX_RUNTIME,
                     "dispatch_scope": getattr(cls, "DISPATCH_SCOPE", "dispatch"),
                     "queue": flow.queue, "concurrency": flow.concurrency,
                     "rate_limit": flow.rate_limit, "limit_key": flow.limit_key,
                     "available": bool(cls.available()), "limits": type_limits_text(flow)})
    if as_json:
        click.echo(_dump([{k: v for k, v in row.items() if k != "limits"} for row in rows]))
        return
    for row in rows:
        row["frequency"] = describe(row["frequency"])
        row["available"] = available_text(row["available"])
    _table(rows, ["type", "task", "class", "source", "frequency", "queue", "max_attempts",
                  "max_runtime", "limits", "available"], HANDLERS_OPTIONAL,
           ("type", "frequency", "queue"), wide)


def available_text(available: bool) -> str:
    """`True`, or `module not installed` for a handler whose `available()` is False."""
    return "True" if available else "module not installed"
