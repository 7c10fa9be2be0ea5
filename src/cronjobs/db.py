"""Engines and transactions: dialect setup, and retrying of transient database errors."""

from __future__ import annotations

import logging
import random
import time
from typing import Callable, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import NullPool

from .errors import StoreError

log = logging.getLogger("cronjobs.db")
T = TypeVar("T")

# MySQL/MariaDB: 1213 deadlock, 1205 lock wait timeout. PostgreSQL: 40P01 deadlock,
# 40001 serialization failure. SQLite: "database is locked" after the busy timeout.
_MYSQL_RETRY = {1213, 1205}
_PG_RETRY = {"40P01", "40001"}


def make_engine(url: str) -> Engine:
    """Create an engine for `url` with the settings cronjobs relies on.

    SQLite: WAL journal, `foreign_keys=ON` on every connection (needed for ON DELETE
    CASCADE), a 30 s busy timeout and `BEGIN IMMEDIATE` so writers queue instead of
    failing. MySQL/MariaDB: READ COMMITTED, so a waiting inserter sees the row another
    transaction committed. Connections are checked before use (`pool_pre_ping`).

    Args:
        url: an SQLAlchemy URL (`sqlite:///cronjobs.db`, `mysql+pymysql://...`,
            `postgresql+psycopg://...`).

    Returns:
        A new Engine.
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False},
                               poolclass=NullPool if ":memory:" not in url else None)
        _setup_sqlite(engine)
        return engine
    kwargs: dict = {"pool_recycle": 3600}
    if url.startswith(("mysql", "mariadb")):
        kwargs["isolation_level"] = "READ COMMITTED"
    return create_engine(url, **kwargs)


def _setup_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # noqa: ANN001
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # noqa: ANN001
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def is_transient(exc: BaseException) -> bool:
    """True for errors that a retry of the whole transaction can fix: deadlock, lock wait
    timeout, SQLite busy, or a pooled connection the server had dropped."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in _MYSQL_RETRY:
        return True
    if getattr(orig, "sqlstate", None) in _PG_RETRY:
        return True
    return isinstance(exc, OperationalError) and "database is locked" in str(orig)


def is_duplicate_key(exc: BaseException) -> bool:
    """True when `exc` is a unique-constraint violation on any backend."""
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    args = getattr(orig, "args", ())
    if args and args[0] == 1062:
        return True
    if getattr(orig, "sqlstate", None) == "23505":
        return True
    return "UNIQUE constraint failed" in str(orig)


def run_in_transaction(engine: Engine, fn: Callable[[Connection], T], *,
                       attempts: int = 8) -> T:
    """Run `fn(conn)` in a transaction, retrying deadlocks and lock timeouts.

    Args:
        engine: the engine to connect with.
        fn: the work; it must be safe to run again from the start.
        attempts: how many times to try before giving up.

    Returns:
        What `fn` returned.

    Raises:
        StoreError: the error was transient but persisted over all attempts.
        Any other exception from `fn` unchanged.
    """
    for attempt in range(1, attempts + 1):
        try:
            with engine.begin() as conn:
                return fn(conn)
        except DBAPIError as exc:
            if not is_transient(exc):
                raise
            if attempt == attempts:
                raise StoreError(f"database stayed busy after {attempts} attempts: {exc.orig}") from exc
            log.debug("transient database error, retrying (%s): %s", attempt, exc.orig)
            time.sleep(min(0.5, 0.01 * 2 ** attempt) * random.random())
    raise AssertionError("unreachable")
