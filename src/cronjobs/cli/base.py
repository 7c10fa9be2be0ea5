"""The `cronjobs` command line. Bad input: one line on stderr, exit status 2, nothing written."""

from __future__ import annotations

import gc
import json
import sys
from datetime import datetime

import click

from ..errors import (
    CronjobsError,
    DatabaseRefused,
    DatabaseUnavailable,
    StoreError,
    migrate_first,
    names_missing_table,
)

EXIT_BAD_INPUT = 2


class Integer(click.IntRange):
    """click's `IntRange`, called an integer in its errors ("'abc' is not a valid
    integer.", not "... a valid integer range.") and its help."""

    name = "integer"


JOB_ID = Integer(max=2**63 - 1)  # a BIGINT; a larger id is a usage error, not a crash
PRIORITY = Integer(min=-2**31, max=2**31 - 1)  # the column's range (INT)
MAX_ATTEMPTS = Integer(min=1, max=2**31 - 1)


class Group(click.Group):
    """Turns bad input into one line `error: <message>` and exit status 2: our own
    `CronjobsError`s and click's usage errors alike. A database that cannot be reached
    is one line and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            try:
                return super().invoke(ctx)
            except Exception as exc:
                if not _is_driver_error(exc):
                    raise
                from ..store.db import our_error  # lazy: CLI start-up time

                raise our_error(exc) from exc
        except StoreError as exc:
            text = str(exc)
            if isinstance(exc, DatabaseRefused) and names_missing_table(text):
                _fail(migrate_first(text), EXIT_BAD_INPUT)
            if isinstance(exc, DatabaseUnavailable):
                text += _database_named()
            _fail(text, 1)
        except CronjobsError as exc:
            _fail(str(exc), EXIT_BAD_INPUT)

    def main(self, *args, **kwargs):
        """Run the CLI and exit the process; a usage error is printed as one line (no
        usage block)."""
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


_OWN_PROCESS = False  # set by `run`: the command is this process (the collector is ours)


def run() -> None:
    """The `cronjobs` console script and `python -m cronjobs`: `main` as a process of its
    own, whose garbage collector it may use as it likes (`main` called from code, tests
    and embedding, leaves the caller's alone).

    The collector is off while the command imports its libraries (several hundred
    thousand objects: each collection would go over all of them again, a good part of a
    `get`, `dispatch`, `tick` or `health`); every command turns it on again when it
    builds its App (`_collect_from_now`). At exit it is frozen: the interpreter's last
    collections over every object imported (SQLAlchemy's included) are spared;
    exit handlers still run, files are still flushed and closed.
    """
    global _OWN_PROCESS
    _OWN_PROCESS = True
    gc.disable()
    try:
        main(prog_name="cronjobs")
    finally:
        gc.freeze()


def _is_driver_error(exc: Exception) -> bool:
    """True for SQLAlchemy's `DBAPIError` (a driver's error). A process that never imported
    SQLAlchemy (`--help`, a command without a database) cannot have raised one, so the
    check does not import it (CLI start-up time)."""
    sa_exc = sys.modules.get("sqlalchemy.exc")
    return sa_exc is not None and isinstance(exc, sa_exc.DBAPIError)


def _database_named() -> str:
    """` (CRONJOBS_DATABASE_URL=<the URL, password hidden>)` for the App this command
    built, or "" when it built none: a driver's error may name the host but not the port
    or the database (PyMySQL's does not)."""
    from ..config.urls import hide_password  # loaded with the settings already

    app = getattr(sys.modules.get("cronjobs.app"), "_current", None)
    if app is None:
        return ""
    return f" (CRONJOBS_DATABASE_URL={hide_password(app.settings.database_url)})"


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _app(create: bool = False, database: bool = True, pool_size: int | None = None):
    """The App. A command that uses the database needs an existing SQLite file unless it
    may `create` one (so a typo in the path or the wrong folder is an error, not a new
    empty database). A command that runs a worker passes the `pool_size` its slots need:
    the App is built with it and installed as the current one."""
    from .. import logs  # lazy: CLI start-up time
    from ..app import App, current, use
    from ..errors import ConfigError
    from ..store.engines import sqlite_file

    if pool_size is None:
        app = current()
    else:
        app = App(pool_size=pool_size)
        use(app)
    logs.setup(app.settings.log_level)
    url = app.engine.url
    database_file = sqlite_file(url) if database else None
    if database_file is not None:
        from pathlib import Path  # lazy: CLI start-up time

        path = Path(database_file)
        if not create and not path.exists():
            raise ConfigError(f"database file {str(path.resolve())!r} does not exist; run "
                              f"`cronjobs migrate` first (CRONJOBS_DATABASE_URL={url})")
        if create and not path.parent.is_dir():
            raise ConfigError(f"folder of the database file does not exist: {str(path.parent)!r}")
    _collect_from_now()
    return app


def _collect_from_now() -> None:
    """In the command's own process (`run`), turn the garbage collector on again over
    what is made from now on only: every command builds its App here, once it has
    imported its libraries. `gc.freeze()` moves what exists now (the modules, the
    settings, the App) where the collector never looks; a long-running command (`worker`,
    `serve`) and what it forks collect as before. Called from code: nothing."""
    if _OWN_PROCESS:
        gc.freeze()
        gc.enable()


def _parse_time(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from None


def parse_time(value: str) -> datetime:
    """`value`, an ISO 8601 time (UTC if naive; `Z` allowed), as a naive UTC datetime.

    Raises:
        ValueError: not an ISO 8601 time, or not from 1970 to 9998 (naming the value).
    """
    from ..clock import parse_utc  # lazy: CLI start-up time

    try:
        return parse_utc(value)
    except ValueError as exc:
        raise ValueError(f"{exc}: {value!r}") from None


def _dump(value) -> str:
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


def _table(rows: list[dict], columns: list[str], optional: list[str] | None = None,
           whole: tuple[str, ...] = (), wide: bool = False) -> None:
    """Print a table, one line per row; given its `optional` columns (and not `wide`),
    fitted to the terminal's width on a terminal (`cli.table.layout`)."""
    from .table import layout, lines, terminal_width  # lazy: CLI start-up time

    width = None if optional is None or wide else terminal_width()
    shown, widths = layout(rows, columns, width, optional or (), whole)
    for line in lines(rows, shown, widths):
        click.echo(line)


WIDE = click.option("--wide", is_flag=True,
                    help="Every column, one line per row, however wide (on a terminal the "
                         "table fits its width: some columns are left out, long cells wrap; "
                         "piped output is always wide).")
