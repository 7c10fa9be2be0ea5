"""Transactions: what a database error means, and the two retry loops (tenacity): a
transaction run again at once after a deadlock, and the worker's back-off while the
database is unreachable. A statement the database refuses for its content is never
retried. The engines themselves are made by `engines`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from .. import limits
from ..errors import DatabaseRefused, DatabaseUnavailable, StoreError
from .engines import COMMITTED

log = logging.getLogger("cronjobs.db")
T = TypeVar("T")

# MySQL/MariaDB: 1213 deadlock, 1205 lock wait timeout. PostgreSQL: 40P01 deadlock,
# 40001 serialization failure, 55P03 lock not available. SQLite: "database is locked".
_MYSQL_TRANSIENT = {1213, 1205}
_PG_TRANSIENT = {"40P01", "40001", "55P03"}
# Connection refused/lost, server gone away or shutting down, too many connections,
# connection killed or timed out by the server; a statement past its time limit
# (MariaDB 1969 max_statement_time, MySQL 3024 max_execution_time): the server is too busy
# or a lock is held now, so running it again at once would only wait as long again.
_MYSQL_UNAVAILABLE = {1040, 1053, 1927, 1969, 2002, 2003, 2005, 2006, 2013, 2014, 2055, 3024,
                      4031}
# The connection itself refused (access denied, unknown database, an auth plugin the
# client lacks, TLS required but not offered): settings to fix, not a statement.
_MYSQL_CONNECT_REFUSED = {1044, 1045, 1049, 1251, 1698, 2026}
# admin/crash shutdown, cannot connect now (classes 08 connection and 53 resources too);
# 57014 a statement cancelled (statement_timeout, or pg_cancel_backend).
_PG_UNAVAILABLE = {"57P01", "57P02", "57P03", "57014"}


def classify(exc: BaseException) -> str | None:
    """Decide what a database error means; the one place that does (STYLE: transient vs
    permanent in `db.py`).

    Returns:
        `"transient"`: deadlock, lock wait timeout, serialization failure, SQLite busy —
        run the whole transaction again now. `"unavailable"`: the server cannot be reached
        or dropped the connection, no pooled connection came free in time, or a statement
        ran past its time limit — wait (back off) and try again. `"refused"`: the server
        refused the statement for its content or the schema (too long, bad value, missing
        table, constraint) — retrying cannot help. None: `exc` is not a database error.
    """
    if isinstance(exc, DatabaseUnavailable):
        return "unavailable"
    if isinstance(exc, DatabaseRefused):
        return "refused"
    if isinstance(exc, StoreError):
        return "transient"
    if isinstance(exc, sa_exc.TimeoutError):  # no pooled connection came free in time
        return "unavailable"
    if not isinstance(exc, DBAPIError):
        return None
    if exc.connection_invalidated:
        return "unavailable"
    orig = exc.orig
    code = _mysql_code(exc)
    if code is not None:  # MySQL/MariaDB (PyMySQL)
        if code in _MYSQL_TRANSIENT:
            return "transient"
        if code in _MYSQL_UNAVAILABLE or isinstance(exc, InterfaceError):
            return "unavailable"
        return "refused"
    sqlstate = getattr(orig, "sqlstate", None)
    if type(orig).__module__.startswith("psycopg"):
        if sqlstate in _PG_TRANSIENT:
            return "transient"
        if (sqlstate is None and isinstance(exc, (OperationalError, InterfaceError))) \
                or (sqlstate or "")[:2] in ("08", "53") or sqlstate in _PG_UNAVAILABLE:
            return "unavailable"
        return "refused"
    text = str(orig).lower()  # SQLite
    if "database is locked" in text or "database is busy" in text:
        return "transient"
    if "unable to open database" in text or "disk i/o error" in text:
        return "unavailable"
    if isinstance(exc, InterfaceError) and "closed" in text:
        return "unavailable"
    return "refused"


def _mysql_code(exc: BaseException) -> int | None:
    """The MySQL/MariaDB error number of a PyMySQL error wrapped in `exc`, else None."""
    args = getattr(getattr(exc, "orig", None), "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_unavailable(exc: BaseException) -> bool:
    """True when the database cannot be reached: worth waiting for (back-off)."""
    return classify(exc) == "unavailable"


def is_duplicate_key(exc: BaseException) -> bool:
    """True when `exc` is a unique-constraint violation on any backend."""
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    return (_mysql_code(exc) == 1062 or getattr(orig, "sqlstate", None) == "23505"
            or "UNIQUE constraint failed" in str(orig))


def driver_message(exc: BaseException) -> str:
    """The driver's own error text on one line, without SQLAlchemy's `[SQL: ...]` part."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return limits.cut(text[0] if text else type(orig).__name__, 500)


def our_error(exc: BaseException) -> StoreError:
    """Turn a database error into ours: `DatabaseUnavailable`, `DatabaseRefused` or (for a
    transient error that persisted) `StoreError`. The message names no SQL."""
    if isinstance(exc, StoreError):
        return exc
    kind = classify(exc)
    if kind == "unavailable":
        return DatabaseUnavailable(f"database unavailable: {driver_message(exc)}")
    if kind == "refused":
        what = "connection" if _mysql_code(exc) in _MYSQL_CONNECT_REFUSED else "statement"
        return DatabaseRefused(f"database refused the {what}: {driver_message(exc)}")
    return StoreError(f"database stayed busy: {driver_message(exc)}")


def run_in_transaction(engine: Engine, fn: Callable[[Connection], T], *,
                       attempts: int = 8) -> T:
    """Run `fn(conn)` in a transaction; run it again on a transient error.

    Deadlocks, lock wait timeouts and SQLite's busy answer are retried at once (with a
    short random pause) up to `attempts` times; so is a pooled connection the server had
    dropped (the pool reconnects), but not a connection that could not be opened.
    Nothing else is retried here.

    Args:
        engine: the engine to connect with.
        fn: the work; it must be safe to run again from the start.
        attempts: how many times to try before giving up.

    Returns:
        What `fn` returned.

    Raises:
        DatabaseUnavailable: the server cannot be reached (callers that can wait use
            `retry_while_unavailable`).
        DatabaseRefused: the server refused a statement (too long, bad value, no table).
        StoreError: a transient error persisted over all attempts.
        Any non-database exception from `fn` unchanged.
    """
    try:
        try:
            return _transaction(engine, fn)
        except Exception as exc:  # the first try runs without a retry loop (the usual case)
            if attempts <= 1 or not _retry_now(exc):
                raise
            first = exc
        import tenacity  # only a transient error pays for the import (CLI start-up time)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(_retry_now),
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_random(0, 0.02) + tenacity.wait_random_exponential(0.01, max=0.5),
            before_sleep=lambda state: log.debug("transient database error, retrying (%s): %s",
                                                 state.attempt_number,
                                                 driver_message(state.outcome.exception())),
            reraise=True)
        for attempt in retrying:
            with attempt:
                if first is not None:  # the loop's attempt 1 is the try made above
                    failed, first = first, None
                    raise failed
                return _transaction(engine, fn)
    except (DBAPIError, sa_exc.TimeoutError) as exc:
        raise our_error(exc) from exc
    raise AssertionError("unreachable")


def _transaction(engine: Engine, fn: Callable[[Connection], T]) -> T:
    try:
        conn = engine.connect()
    except DBAPIError as exc:
        # Connecting failed: our error at once, so a connection that never opened (a
        # server that accepts and never answers reads as a lost connection) is not taken
        # for a dropped pooled one and tried again; a transient error still is.
        raise our_error(exc) from exc
    with conn:
        with conn.begin():
            result = fn(conn)
        if conn.dialect.name in ("mysql", "mariadb"):
            conn.info[COMMITTED] = True  # nothing to roll back on return
        return result


def _retry_now(exc: BaseException) -> bool:
    # A dropped pooled connection is retried too: the pool hands out a fresh one.
    return classify(exc) == "transient" or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated)


def retry_while_unavailable(fn: Callable[[], T], what: str, *, give_up_seconds: float | None = 600,
                            stop: threading.Event | None = None,
                            first_seconds: float = 3.0, cap_seconds: float = 60.0) -> T:
    """Call `fn()` until the database answers: 3 s, doubling to 60 s between tries.

    Only `DatabaseUnavailable` (or a raw error classified "unavailable") is waited for;
    any other error is raised at once. Used by the worker for claims and for writing
    outcomes; the waits are logged at WARNING with the driver's message only.

    Args:
        fn: the work (usually a `run_in_transaction` call).
        what: what is being done, for the log line ("finishing job 12").
        give_up_seconds: raise the last error after this long (None: never give up).
        stop: when set, the wait ends and the last error is raised (worker shutdown).
        first_seconds, cap_seconds: the back-off's first pause and its cap, in seconds.

    Returns:
        What `fn` returned.

    Raises:
        DatabaseUnavailable: still unavailable after `give_up_seconds` or `stop`.
    """
    import tenacity  # lazy: CLI start-up time (the worker imports it anyway)

    stops = [tenacity.stop_after_delay(give_up_seconds)] if give_up_seconds is not None else []
    if stop is not None:
        stops.append(tenacity.stop_when_event_set(stop))
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_unavailable),
        wait=tenacity.wait_exponential(multiplier=first_seconds, max=cap_seconds),
        stop=tenacity.stop_any(*stops) if stops else tenacity.stop_never,
        sleep=stop.wait if stop is not None else time.sleep,
        before_sleep=lambda state: log.warning(
            "database unavailable while %s (%s); retrying in %.1f s", what,
            driver_message(state.outcome.exception()), state.upcoming_sleep),
        reraise=True)
    try:
        return retrying(fn)
    except (DBAPIError, sa_exc.TimeoutError) as exc:
        raise our_error(exc) from exc
