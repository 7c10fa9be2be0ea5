"""Small helpers that hide dialect differences from the store functions."""

from __future__ import annotations

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import Insert


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


def locking_read(conn: Connection, stmt):  # noqa: ANN001, ANN201
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


def skip_locked(conn: Connection, stmt):  # noqa: ANN001, ANN201
    """Add FOR UPDATE SKIP LOCKED where the backend has row locks (not SQLite)."""
    if name(conn) == "sqlite":
        return stmt  # one writer at a time: the conditional UPDATE decides
    return stmt.with_for_update(skip_locked=True)
