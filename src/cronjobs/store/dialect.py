"""Small helpers that hide dialect differences from the store functions."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import (
    Connection,
    DateTime,
    Interval,
    String,
    Table,
    func,
    literal,
    literal_column,
    select,
    type_coerce,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ColumnElement, Insert


def name(conn: Connection) -> str:
    """`mysql` (MySQL and MariaDB), `postgresql` or `sqlite`."""
    return conn.dialect.name if conn.dialect.name != "mariadb" else "mysql"


def insert_ignore(conn: Connection, table: Table, conflict_columns: list[str]) -> Insert:
    """An INSERT that skips rows whose unique key already exists (rowcount 0).

    PostgreSQL and SQLite: ON CONFLICT DO NOTHING. MySQL/MariaDB: INSERT IGNORE, which is
    only used on tables without foreign keys and with values that always fit, because
    IGNORE also turns other errors into warnings.
    """
    dialect = name(conn)
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=conflict_columns)
    if dialect == "sqlite":
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


def db_now(conn: Connection, plus_seconds: float = 0.0) -> ColumnElement:
    """SQL expression: the database server's clock (naive UTC) plus `plus_seconds`.

    Leases (`locked_until`) and heartbeats (`last_seen_at`) are written and judged with
    the database's clock, not the host's, so a host whose clock is off cannot take rows
    from a live worker or declare a live worker dead (docs/architecture.md, "Time").
    Everything else binds the injected clock's `now`.
    """
    dialect = name(conn)
    if dialect == "mysql":
        micros = int(round(plus_seconds * 1_000_000))
        return func.timestampadd(literal_column("MICROSECOND"), micros,
                                 literal_column("UTC_TIMESTAMP(6)"), type_=DateTime)
    if dialect == "postgresql":
        return (literal_column("timezone('UTC', statement_timestamp())", DateTime)
                + literal(timedelta(seconds=plus_seconds), Interval))
    # SQLite stores DateTime as 'YYYY-MM-DD HH:MM:SS.ffffff' (compared as text); 'now'
    # has millisecond precision, padded to six digits.
    text = func.strftime("%Y-%m-%d %H:%M:%f", "now", f"{plus_seconds:+.3f} seconds",
                         type_=String).concat("000")
    return type_coerce(text, DateTime)


def database_now(conn: Connection) -> datetime:
    """The database server's clock now, as a naive UTC datetime (one round trip)."""
    value = conn.execute(select(db_now(conn))).scalar_one()
    if isinstance(value, str):  # SQLite returns the text
        return datetime.fromisoformat(value)
    return value

