"""The dialect differences of the store, each written once.

MariaDB/MySQL, PostgreSQL and SQLite differ in: the placeholder style of driver SQL
(`%(name)s` for PyMySQL and psycopg, `:name` for sqlite3), SQLite's text storage of times
(SQLAlchemy's format, written by `bind`, parsed back by `decode_times`), the database
clock (`lease_sql`), row locks (`skip_locked`, `locking_read`; SQLite has one writer at a
time instead) and "insert unless the key exists" (`insert_ignore`).

Two conditions every reader of the queue must agree on are written here once, as SQL
text, and used both by the driver SQL of the hot path and, wrapped, by SQLAlchemy Core:

- the due condition (`due_sql`, `due`): `pending`, not scheduled later than now, and
  not past its `expires_at`;
- the lease expression (`lease_sql`, `db_now`): the database server's clock plus a bound
  number of seconds. Leases and heartbeats are written and judged with the database's
  clock, not the host's, so a host whose clock is off cannot take rows from a live
  worker or declare a live worker dead (docs/architecture.md, "Time").
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
    DateTime,
    Table,
    bindparam,
    select,
    text,
    type_coerce,
)
from sqlalchemy.sql import ColumnElement, Insert

from .models import UtcDateTime

# The due condition on `cronjob_queue` (`{now}`: the placeholder of the claiming instant).
# A row past its `expires_at` is never due: the sweep ends it `expired` (`store.expiry`).
# The claim by id (an operator's "run it now", due or not) still refuses an expired row.
_NOT_EXPIRED = "(expires_at IS NULL OR expires_at > {now})"
_DUE = ("status = 'pending' AND (scheduled_at IS NULL OR scheduled_at <= {now}) AND "
        + _NOT_EXPIRED)


def name(conn: Connection) -> str:
    """`mysql` (MySQL and MariaDB), `postgresql` or `sqlite`."""
    return conn.dialect.name if conn.dialect.name != "mariadb" else "mysql"


def unindexed(column: str) -> str:
    """`column` (a text column of PostgreSQL) in an expression no index serves, for
    statements that find their rows by id and only check `column` (the claim's and the
    outcome batch's UPDATEs check the status): a plain `status = ...` lets the planner, on
    statistics older than a burst of new rows, scan a status index instead
    (`store.claim._update_sql` has the figures)."""
    return f"{column} || ''"


def ph(dialect: str, key: str) -> str:
    """The driver-SQL placeholder of parameter `key` in `dialect` (`name(conn)`)."""
    return f":{key}" if dialect == "sqlite" else f"%({key})s"


def bind(dialect: str, value: Any) -> Any:
    """`value` as driver SQL binds it: SQLite gets times as SQLAlchemy stores them,
    `YYYY-MM-DD HH:MM:SS.ffffff` with the year in four digits (`isoformat`, 3x faster
    than `strftime`, which also writes a year below 1000 without its zeros; an aware
    time keeps its wall clock, as before: callers pass naive UTC)."""
    if dialect == "sqlite" and isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat(" ", "microseconds")
    return value


def decode_times(dialect: str, rows: list[dict], columns: Iterable[str]) -> list[dict]:
    """Parse the time `columns` of rows read by driver SQL (SQLite returns text); the rows
    are changed in place and returned."""
    if dialect == "sqlite":
        for row in rows:
            for column in columns:
                if isinstance(row.get(column), str):
                    row[column] = datetime.fromisoformat(row[column])
    return rows


def due_sql(dialect: str) -> str:
    """The due condition as driver SQL on `cronjob_queue`, with the placeholder `now`:
    `pending`, `scheduled_at` empty or not after `now`, `expires_at` empty or after `now`
    (naive UTC)."""
    return _DUE.format(now=ph(dialect, "now"))


def not_expired_sql(dialect: str) -> str:
    """Driver SQL on `cronjob_queue`, placeholder `now`: the row's `expires_at` is empty or
    after `now` (naive UTC); part of `due_sql`, and the claim by id's own check."""
    return _NOT_EXPIRED.format(now=ph(dialect, "now"))


def due(now: datetime) -> ColumnElement:
    """The due condition (`due_sql`) as a SQLAlchemy Core clause, `now` bound (naive UTC).
    Its columns are unqualified: for statements on `cronjob_queue` alone."""
    clause = text("(" + _DUE.format(now=":due_at") + ")").bindparams(
        bindparam("due_at", now, type_=UtcDateTime, unique=True))
    return type_coerce(clause, Boolean)


def lease_sql(dialect: str, placeholder: str) -> str:
    """SQL: the database server's clock (naive UTC) plus the bound `lease_value`, whose
    placeholder is `placeholder` (`ph(dialect, "lease")` in driver SQL)."""
    if dialect == "mysql":
        return f"TIMESTAMPADD(MICROSECOND, {placeholder}, UTC_TIMESTAMP(6))"
    if dialect == "postgresql":
        return f"timezone('UTC', statement_timestamp()) + {placeholder}"
    # SQLite stores DateTime as 'YYYY-MM-DD HH:MM:SS.ffffff' (compared as text); 'now'
    # has millisecond precision, padded to six digits.
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', {placeholder}) || '000'"


def now_sql(dialect: str) -> str:
    """SQL: the database server's clock now (naive UTC), as `lease_sql` reads it (no
    placeholder). Flow control's `until` and rate windows are judged with it."""
    if dialect == "mysql":
        return "UTC_TIMESTAMP(6)"
    if dialect == "postgresql":
        return "timezone('UTC', statement_timestamp())"
    return "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"


def lease_value(dialect: str, seconds: float) -> Any:
    """The value to bind in `lease_sql` for `seconds` (negative: the past)."""
    if dialect == "mysql":
        return int(round(seconds * 1_000_000))
    if dialect == "postgresql":
        return timedelta(seconds=seconds)
    return f"{seconds:+.3f} seconds"


def db_now(conn: Connection, plus_seconds: float = 0.0) -> ColumnElement:
    """SQLAlchemy Core: the database server's clock (naive UTC) plus `plus_seconds`
    (`lease_sql`). Leases (`locked_until`, `lease_until`) and heartbeats (`last_seen_at`)
    use it; everything else binds the injected clock's `now`."""
    dialect = name(conn)
    clause = text(lease_sql(dialect, ":lease")).bindparams(
        bindparam("lease", lease_value(dialect, plus_seconds), unique=True))
    return type_coerce(clause, DateTime)


def database_now(conn: Connection) -> datetime:
    """The database server's clock now, as a naive UTC datetime (one round trip)."""
    value = conn.execute(select(db_now(conn))).scalar_one()
    if isinstance(value, str):  # SQLite returns the text
        return datetime.fromisoformat(value)
    return value


def insert_ignore(conn: Connection, table: Table, conflict_columns: list[str]) -> Insert:
    """An INSERT that skips rows whose unique key already exists (rowcount 0).

    PostgreSQL and SQLite: ON CONFLICT DO NOTHING. MySQL/MariaDB: INSERT IGNORE, which is
    only used on tables without foreign keys and with values that always fit, because
    IGNORE also turns other errors into warnings.
    """
    dialect = name(conn)
    if dialect == "postgresql":  # the dialect's modules load only where they are used (CLI)
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table).on_conflict_do_nothing(index_elements=conflict_columns)
    if dialect == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table).on_conflict_do_nothing(index_elements=conflict_columns)
    return table.insert().prefix_with("IGNORE")


def locking_read(conn: Connection, stmt):
    """Make a SELECT read the latest committed version and lock it (no-op on SQLite).

    MySQL/MariaDB: a plain SELECT in REPEATABLE READ could miss a row committed after the
    caller's snapshot; a locking read always sees it.
    """
    dialect = name(conn)
    if dialect == "mysql":
        return stmt.with_for_update(read=True)
    if dialect == "postgresql":
        return stmt.with_for_update(key_share=True)
    return stmt


def skip_locked(conn: Connection, stmt):
    """Add FOR UPDATE SKIP LOCKED where the backend has row locks (not SQLite)."""
    if name(conn) == "sqlite":
        return stmt  # one writer at a time: the conditional UPDATE decides
    return stmt.with_for_update(skip_locked=True)


def lock_sql(dialect: str, skip: bool) -> str:
    """The driver-SQL row-lock suffix of a SELECT: ` FOR UPDATE` (with ` SKIP LOCKED`
    when `skip`), nothing on SQLite (one writer at a time: conditional UPDATEs decide)."""
    if dialect == "sqlite":
        return ""
    return " FOR UPDATE SKIP LOCKED" if skip else " FOR UPDATE"
