"""`cronjobs migrate` and `cronjobs list-handlers`."""

from __future__ import annotations

import click

from .base import _app, _dump, _table, main


@main.command()
def migrate() -> None:
    """Create or upgrade the tables (Alembic, to the newest revision)."""
    from ..migrate import current as revision
    from ..migrate import upgrade

    app = _app(create=True)
    upgrade(app.engine)
    click.echo(f"database at revision {revision(app.engine)} ({app.engine.url.render_as_string()})")


@main.command("list-handlers")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_handlers(as_json: bool) -> None:
    """Every registered handler: type, task, class, source, frequency, limits, available.

    A cron macro is shown with its expansion (`@daily (0 0 * * *)`); a handler whose
    available() is False shows "module not installed" (its task is not scheduled)."""
    from registry import class_name

    from ..handler import task_name
    from ..slots import describe, expand

    app = _app(database=False)
    registry = app.handlers
    rows = []
    for job_type, cls in sorted(registry.registered_handlers().items()):
        rows.append({"type": job_type, "task": task_name(job_type),
                     "class": class_name(cls),
                     "source": registry.handler_source(job_type) or "",
                     "frequency": cls.FREQUENCY or "",
                     "expanded_frequency": expand(cls.FREQUENCY) if cls.FREQUENCY else "",
                     "max_attempts": cls.MAX_ATTEMPTS,
                     "max_runtime": cls.MAX_RUNTIME,
                     "queue": cls.QUEUE or app.settings.default_queue,
                     "available": bool(cls.available())})
    if as_json:
        click.echo(_dump(rows))
        return
    for row in rows:
        row["frequency"] = describe(row["frequency"])
        row["available"] = available_text(row["available"])
    _table(rows, ["type", "task", "class", "source", "frequency", "max_attempts", "max_runtime",
                  "available"])


def available_text(available: bool) -> str:
    """`True`, or `module not installed` for a handler whose `available()` is False."""
    return "True" if available else "module not installed"
