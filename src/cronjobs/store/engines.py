"""Engines: one per database URL, with the settings cronjobs relies on per dialect (SQLite's
WAL and BEGIN IMMEDIATE, MySQL/MariaDB's READ COMMITTED and packet size, the short
readers' statement timeouts) and the pools sized by the caller."""

from __future__ import annotations

import math

from sqlalchemy import URL, Engine, create_engine, event
from sqlalchemy.pool import NullPool, QueuePool

from .. import limits
from ..errors import ConfigError
from .drivers import connect_pymysql

# Connection info set by `db.run_in_transaction`: its transaction has just committed (the
# MySQL/MariaDB pool then skips its reset, `_reset_unless_committed`).
COMMITTED = "cronjobs_committed"


CONNECT_TIMEOUT_SECONDS = 10  # PostgreSQL's, when neither the URL nor the caller sets one


def make_engine(url: str, pool_size: int = 5, *, pool_timeout_seconds: float = 30,
                statement_timeout_seconds: float | None = None,
                autocommit: bool = False) -> Engine:
    """Create an engine for `url` with the settings cronjobs relies on.

    SQLite: WAL journal, `foreign_keys=ON` on every connection (needed for ON DELETE
    CASCADE), a 30 s busy timeout and `BEGIN IMMEDIATE` so writers queue instead of
    failing. MySQL/MariaDB: READ COMMITTED, so a waiting inserter sees the row another
    transaction committed, a server whose `max_allowed_packet` is below 4 MiB is refused
    at the first connection (`ConfigError`), PyMySQL's connections opened by
    `drivers.connect_pymysql` (TLS, the greeting's timeout).
    Pooled connections are not pinged before use: a connection the server dropped fails
    its transaction, which `run_in_transaction` runs again on a fresh one.

    Args:
        url: an SQLAlchemy URL (`sqlite:///cronjobs.db`, `mysql+pymysql://...`,
            `postgresql+psycopg://...`).
        pool_size: connections kept open, as many again for a burst (a worker passes its
            thread count); 0: no pool, a connection per use.
        pool_timeout_seconds: the wait for a free pooled connection, then
            `sqlalchemy.exc.TimeoutError` (classified "unavailable").
        statement_timeout_seconds: the budget of short readers (the dashboard, the health
            checks): connecting, a statement and a lock wait each end after about this
            long, as "unavailable" (`_limit_connections`). None (the worker): no limit.
        autocommit: MySQL/MariaDB: connections in autocommit mode, for statements that
            commit themselves (`App.autocommit_engine`); ignored elsewhere.

    Returns: a new Engine.
    """
    pool: dict = {"pool_size": pool_size, "max_overflow": pool_size,
                  "pool_timeout": pool_timeout_seconds} if pool_size else {"poolclass": NullPool}
    if url.startswith("sqlite"):
        return _sqlite_engine(url, pool, statement_timeout_seconds)
    kwargs: dict = {"pool_recycle": 3600, **pool,
                    "connect_args": _connect_args(url, statement_timeout_seconds)}
    if url.startswith(("mysql", "mariadb")):  # the pool's reset: `_reset_unless_committed`
        engine = create_engine(url, pool_reset_on_return=None, **kwargs,
                               isolation_level="AUTOCOMMIT" if autocommit else "READ COMMITTED")
        _setup_mysql(engine)
    else:
        engine = create_engine(url, **kwargs)
    if statement_timeout_seconds is not None:
        _limit_connections(engine, statement_timeout_seconds)
    return engine


def _sqlite_engine(url: str, pool: dict, timeout: float | None) -> Engine:
    """`make_engine` for SQLite: pooled (opening the file, the PRAGMAs, the WAL checkpoint
    would otherwise be paid by every transaction), but in memory SQLAlchemy's own pool (one
    database)."""
    if ":memory:" in url:
        pool = {}
    elif "poolclass" not in pool:  # a pool of `pool_size` (NullPool when 0)
        pool["poolclass"] = QueuePool
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False},
                           **pool)
    _setup_sqlite(engine, timeout)
    return engine


def _connect_args(url: str, timeout: float | None) -> dict:
    """Driver options that bound connecting (and, for PyMySQL, reading) by `timeout`.
    None: PostgreSQL's connecting still ends after `CONNECT_TIMEOUT_SECONDS` unless the
    URL sets `connect_timeout` (libpq waits forever by default, also on a server that
    accepts and never answers); PyMySQL's own default is the same 10 s (`drivers`)."""
    if timeout is None:
        if url.startswith("postgresql") and "connect_timeout=" not in url:
            return {"connect_timeout": CONNECT_TIMEOUT_SECONDS}
        return {}
    if url.startswith(("mysql", "mariadb")):
        # read_timeout: a server that hangs (accepts, never answers) is given up on too.
        return {"connect_timeout": timeout, "read_timeout": timeout + 2}
    if url.startswith("postgresql"):
        return {"connect_timeout": max(2, math.ceil(timeout))}  # libpq: whole seconds, >= 2
    return {}


def _limit_connections(engine: Engine, timeout: float) -> None:
    """Give every new connection of `engine` a statement timeout of `timeout` seconds.

    A statement waiting for a lock (`LOCK TABLES`, `LOCK TABLE ... ACCESS EXCLUSIVE`, a
    row lock) is stopped by the statement timeout, which is an "unavailable" error, never
    run again at once. The lock waits are one second longer, so the statement timeout is
    what fires: a lock wait timeout would be "transient" and retried up to 8 times.
    MariaDB: `max_statement_time`, `lock_wait_timeout`, `innodb_lock_wait_timeout`;
    MySQL: `max_execution_time` (SELECT only); PostgreSQL: `statement_timeout`, which
    counts lock waits (committed, so the pool's rollback on return keeps it).
    """
    lock_wait = math.ceil(timeout) + 1

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        if engine.dialect.name == "postgresql":
            cur.execute(f"SET statement_timeout = {int(timeout * 1000)}")
            dbapi_conn.commit()
        elif "mariadb" in dbapi_conn.get_server_info().lower():
            cur.execute(f"SET SESSION max_statement_time = {timeout:.3f}, "
                        f"lock_wait_timeout = {lock_wait}, innodb_lock_wait_timeout = {lock_wait}")
        else:
            cur.execute(f"SET SESSION max_execution_time = {int(timeout * 1000)}, "
                        f"lock_wait_timeout = {lock_wait}, innodb_lock_wait_timeout = {lock_wait}")
        cur.close()


def _setup_mysql(engine: Engine) -> None:
    """MySQL/MariaDB: refuse a small `max_allowed_packet`; reset returned connections
    unless just committed; PyMySQL's connections are `drivers.connect_pymysql`'s."""
    if engine.dialect.driver == "pymysql":
        event.listen(engine, "do_connect", connect_pymysql)
    _check_mysql_packet(engine)
    _reset_unless_committed(engine)


def _reset_unless_committed(engine: Engine) -> None:
    """Roll back a MySQL/MariaDB connection given back to the pool, unless
    `run_in_transaction` has just committed its transaction: PyMySQL sends a ROLLBACK
    even when no transaction is open, and the pool's own reset after every commit was a
    third round trip per transaction (INSERT, COMMIT, ROLLBACK for one keyed dispatch)."""

    @event.listens_for(engine, "reset")
    def _on_reset(dbapi_conn, record, state):
        committed = record.info.pop(COMMITTED, False) if record is not None else False
        if not (committed or state.terminate_only or state.transaction_was_reset):
            dbapi_conn.rollback()


def _check_mysql_packet(engine: Engine) -> None:
    """Refuse a server whose `max_allowed_packet` is below what our size limits need:
    the server would drop the connection ("gone away") instead of refusing the row."""

    @event.listens_for(engine, "first_connect")
    def _on_first_connect(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        cur.execute("SELECT @@max_allowed_packet")
        packet = int(cur.fetchone()[0])
        cur.close()
        if packet < limits.MIN_MYSQL_PACKET_BYTES:
            raise ConfigError(
                f"the MySQL/MariaDB server's max_allowed_packet is {packet:,} bytes; cronjobs "
                f"needs at least {limits.MIN_MYSQL_PACKET_BYTES:,} (payloads and results of up "
                f"to {limits.PAYLOAD_MAX_BYTES:,} bytes): set max_allowed_packet=16M")


# An execution option of a SQLite engine's view (`sqlite_autocommit`): no BEGIN IMMEDIATE,
# so each statement is its own transaction (the driver's autocommit; the connections'
# `isolation_level` is None) and the closing COMMIT finds nothing to commit.
SQLITE_AUTOCOMMIT = "cronjobs_sqlite_autocommit"


def sqlite_autocommit(engine: Engine) -> Engine:
    """A view of SQLite `engine` (the same pool) whose transactions issue no BEGIN: each
    statement commits itself. For a write of one statement (`App.autocommit_engine`);
    a transaction of several statements on it is not atomic.

    Returns: an Engine sharing `engine`'s pool and listeners.
    """
    return engine.execution_options(**{SQLITE_AUTOCOMMIT: True})


def _setup_sqlite(engine: Engine, timeout: float | None = None) -> None:
    busy_ms = 30000 if timeout is None else int(timeout * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        if not conn.get_execution_options().get(SQLITE_AUTOCOMMIT):
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def backend_name(engine: Engine) -> str:
    """The database behind `engine`, as health and the logs name it: `sqlite`, `mysql`,
    `mariadb` or `postgresql`."""
    return engine.dialect.name


def sqlite_file(url: URL) -> str | None:
    """The file of an SQLite database URL; None for an in-memory SQLite database and for
    every other backend."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return url.database


def autocommit_view(engine: Engine) -> Engine | None:
    """`engine` seen in autocommit mode without a pool of its own, where the driver allows
    it: PostgreSQL (psycopg switches on the client) and SQLite (`sqlite_autocommit`). None
    on MySQL/MariaDB, whose switch is a statement: there, a pool of autocommit connections
    (`autocommit_needs_pool`)."""
    name = engine.dialect.name
    if name == "sqlite":
        return sqlite_autocommit(engine)
    if name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return None


def autocommit_needs_pool(engine: Engine) -> bool:
    """True where autocommit needs connections of its own (MySQL/MariaDB: `SET autocommit`
    is a statement, so a pool whose connections are made in that mode)."""
    return engine.dialect.name in ("mysql", "mariadb")
