"""Inserting job rows: one (under the idempotency-key rules) or many.

The rows come from `cronjobs.job.dispatching.build_row`. One insert per dispatched job is on
the hot path, so the statements are driver SQL per dialect (see `store.claim`); a batch
without keys is one multi-row statement on MariaDB and PostgreSQL (~20,000 rows/s against
~10,000 through Core's insertmanyvalues) and Core's multi-row insert on SQLite.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.exc import DBAPIError, IntegrityError

from ..errors import InvalidJob
from ..status import Status
from .db import is_duplicate_key, our_error
from .jobs import select_by_key
from .models import cronjob_queue as q
from .sql import bind, name, ph

TABLE = q.name


def insert_job(conn: Connection, values: dict, *, taken: bool = False) -> tuple[dict, bool]:
    """Insert one row, or find the row that holds its idempotency key.

    Args:
        conn: a connection inside the caller's transaction.
        values: column values (payload already JSON text, times naive UTC).
        taken: the caller found the key taken a moment ago (`insert_new_sqlite`): its
            holder is read first (an insert finding the key taken would burn an id).

    Returns:
        `(row, created)`: `row` has `id`, `status` and `payload` of the new or existing
        row; `created` is False when the key was taken. A concurrent inserter of the same
        key makes this wait for its transaction: if it commits we return its row, if it
        rolls back we insert ours.

    Raises:
        IntegrityError: another constraint (a parent that does not exist).
        InvalidJob: the key's holder kept being deleted between our insert and our read.
    """
    key = values.get("idempotency_key")
    for attempt in range(5):
        new_id = None if taken and attempt == 0 else _insert_one(conn, values)
        if new_id is not None:
            return _new_row(new_id, values), True
        existing = select_by_key(conn, key)
        if existing is not None:
            return existing, False
        # The holder of the key was deleted between our insert and our read: try again.
    raise InvalidJob(f"idempotency key {key!r} kept changing hands; giving up")


def insert_new_direct(engine: Engine, values: dict) -> tuple[dict | None, bool]:
    """A new row written straight through the driver where that pays (SQLite:
    `insert_new_sqlite`); `(None, False)` elsewhere: the caller takes the general path."""
    if engine.dialect.name != "sqlite":
        return None, False
    return insert_new_sqlite(engine, values)


def insert_new_sqlite(engine: Engine, values: dict) -> tuple[dict | None, bool]:
    """SQLite: insert one row in a statement that commits itself, on the pool's driver
    connection: no SQLAlchemy connection, transaction or result objects, ~35 % of a keyed
    dispatch's time on SQLite, where the statement never leaves the process (the other
    databases' round trip hides them). Called outside any transaction.

    Args:
        engine: a SQLite engine (its connections in the driver's autocommit mode, as
            `engines.make_engine` makes them; an implicit transaction is committed here).
        values: column values as `dispatching.build_row` makes them.

    Returns:
        `(row, taken)`: the new row (as `insert_job` gives it) and False; `(None, True)`
        when the key is taken; `(None, False)` when the driver raised (the file cannot be
        opened, busy past its timeout, a missing parent, no table). Without a row the
        caller takes the general path, `insert_job(..., taken=taken)` in
        `db.run_in_transaction`, which reads the key's holder, retries a busy database,
        or raises the mapped error.

    Raises:
        DatabaseUnavailable: no pooled connection came free within the pool's timeout
            (the general path would wait for it once more).
    """
    sql = _insert_sql("sqlite", tuple(values), values.get("idempotency_key") is not None)
    params = {f"v_{c}": bind("sqlite", v) for c, v in values.items()}
    driver_error = engine.dialect.loaded_dbapi.Error
    try:
        raw = engine.raw_connection()  # the pool raises the driver's own errors unwrapped
    except sa_exc.TimeoutError as exc:
        raise our_error(exc) from exc
    except (DBAPIError, driver_error):
        return None, False
    try:
        driver = raw.driver_connection
        try:
            cursor = driver.execute(sql, params)
            if driver.in_transaction:  # an engine of the caller's: the driver's own BEGIN
                driver.commit()
        except driver_error:
            return None, False
        if cursor.rowcount == 1:
            return _new_row(cursor.lastrowid, values), False
        return None, True
    finally:
        raw.close()


def _new_row(new_id: int, values: dict) -> dict:
    return {"id": new_id, "status": values.get("status", Status.PENDING),
            "payload": values.get("payload")}


def insert_jobs(conn: Connection, rows: Sequence[dict]) -> list[int]:
    """Insert many rows (keys or not, all inserted: a taken key raises); return their ids
    in input order.

    When the rows share their columns, MariaDB and PostgreSQL use one driver-SQL
    statement per batch (`_insert_mysql`, `_insert_postgresql`) and SQLite the driver's
    `executemany` (`_insert_sqlite`); otherwise the Core insert.

    Raises:
        IntegrityError: a constraint refused a row (nothing of the batch is kept by the
            caller's transaction).
    """
    if not rows:
        return []
    dialect = name(conn)
    if len({tuple(r) for r in rows}) == 1:
        insert = {"mysql": _insert_mysql, "postgresql": _insert_postgresql,
                  "sqlite": _insert_sqlite}[dialect]
        return insert(conn, list(rows))
    stmt = q.insert().returning(q.c.id, sort_by_parameter_order=True)
    return [r[0] for r in conn.execute(stmt, list(rows))]


@functools.lru_cache(maxsize=32)
def _insert_sql(dialect: str, columns: tuple[str, ...], keyed: bool) -> str:
    p = functools.partial(ph, dialect)
    sql = (f"INSERT INTO {TABLE} ({', '.join(columns)}) "
           f"VALUES ({', '.join(p('v_' + c) for c in columns)})")
    if dialect == "mysql":
        return sql
    sql += " ON CONFLICT (idempotency_key) DO NOTHING" if keyed else ""
    # SQLite: the cursor's lastrowid and rowcount, cheaper than a result row to fetch.
    return sql if dialect == "sqlite" else sql + " RETURNING id"


def _insert_one(conn: Connection, values: dict) -> int | None:
    """Insert one job row; its id, or None when its idempotency key is taken (the caller
    reads the holder). A concurrent inserter of the same key makes this wait for its
    transaction (the unique index), on every backend.

    MySQL/MariaDB: a duplicate-key error rolls back only the statement, not the caller's
    transaction (INSERT IGNORE would also silence foreign-key and truncation errors).

    Raises:
        IntegrityError: another constraint (a parent that does not exist).
    """
    dialect = name(conn)
    columns = tuple(values)
    sql = _insert_sql(dialect, columns, values.get("idempotency_key") is not None)
    params = {f"v_{c}": bind(dialect, v) for c, v in values.items()}
    if dialect == "postgresql":
        row = conn.exec_driver_sql(sql, params).first()
        return row[0] if row else None
    if dialect == "sqlite":
        result = conn.exec_driver_sql(sql, params)
        return result.lastrowid if result.rowcount == 1 else None
    try:
        return conn.exec_driver_sql(sql, params).lastrowid
    except IntegrityError as exc:
        if is_duplicate_key(exc):
            return None
        raise


# A multi-row INSERT stays well under the smallest `max_allowed_packet` we accept (4 MiB).
_MANY_MAX_BYTES = 2 * 1024 * 1024
_VARYING = frozenset({"payload", "title", "parent_id", "scheduled_at"})


def _insert_mysql(conn: Connection, rows: list[dict]) -> list[int]:
    """Insert rows without idempotency keys with multi-row `INSERT ... RETURNING id`
    (MariaDB), as literal SQL: PyMySQL escaping 13 bound values per row cost more than
    the server's insert, so values shared by the batch (type, queue, times ...) are
    escaped once and the rest one per row. Statements stay under 2 MiB.

    Args:
        rows: column values as `dispatching.build_row` makes them, all with the same columns.

    Returns:
        The new ids in input order (auto-increment ids of one statement rise in the
        order of its VALUES).

    Raises:
        IntegrityError: a constraint refused a row (a parent that does not exist).
    """
    escape = conn.connection.dbapi_connection.escape
    columns = tuple(rows[0])
    head = f"INSERT INTO {TABLE} ({', '.join(columns)}) VALUES "
    shared: dict[tuple[str, Any], str] = {}

    def literal(column: str, value: Any) -> str:
        if value is None:
            return "NULL"
        if column in _VARYING:
            return escape(value)
        key = (column, value)
        text = shared.get(key)
        if text is None:
            text = shared[key] = escape(value)
        return text

    ids: list[int] = []
    chunk: list[str] = []
    size = 0
    for row in rows:
        values = "(" + ", ".join([literal(c, row[c]) for c in columns]) + ")"
        if chunk and (size + len(values) > _MANY_MAX_BYTES or len(chunk) >= 1000):
            ids += _insert_values(conn, head, chunk)
            chunk, size = [], 0
        chunk.append(values)
        size += len(values) + 2
    if chunk:
        ids += _insert_values(conn, head, chunk)
    return ids


def _insert_values(conn: Connection, head: str, chunk: list[str]) -> list[int]:
    # The DB-API cursor itself, without parameters: PyMySQL then sends the text as it is
    # (through SQLAlchemy it would %-format it, and a % in a payload would break it).
    dbapi_conn = conn.connection.dbapi_connection
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute(head + ", ".join(chunk) + " RETURNING id")
        return sorted(r[0] for r in cursor.fetchall())
    except conn.dialect.loaded_dbapi.Error as exc:
        lost = conn.dialect.is_disconnect(exc, dbapi_conn, cursor)
        if lost:
            conn.invalidate()
        raise DBAPIError.instance(f"{head}... ({len(chunk)} rows)", None, exc,
                                  conn.dialect.loaded_dbapi.Error,
                                  connection_invalidated=lost) from None
    finally:
        cursor.close()


def _insert_sqlite(conn: Connection, rows: list[dict]) -> list[int]:
    """Insert rows with the same columns by the driver's `executemany` (SQLite): one
    prepared statement stepped once per row in C. Core's insert with `RETURNING` in
    parameter order ran one statement per row (SQLite does not promise the order of a
    multi-row RETURNING): ~40 % of `dispatch_many`'s time.

    The ids are `last_insert_rowid()` and the ones before it: the transaction holds
    SQLite's only write lock from its first insert on (`BEGIN IMMEDIATE`, or the first
    write of a deferred transaction), and each row of `executemany` gets the next rowid
    after the largest ever used (the id is the rowid, AUTOINCREMENT), so the rows of one
    call get consecutive ids in input order.

    Raises:
        IntegrityError: a constraint refused a row (the caller's transaction rolls back).
    """
    columns = tuple(rows[0])
    sql = _insert_sql("sqlite", columns, False).removesuffix(" RETURNING id")
    params = [{f"v_{c}": bind("sqlite", row[c]) for c in columns} for row in rows]
    conn.exec_driver_sql(sql, params)
    last = conn.exec_driver_sql("SELECT last_insert_rowid()").scalar_one()
    return list(range(last - len(rows) + 1, last + 1))


def _insert_postgresql(conn: Connection, rows: list[dict]) -> list[int]:
    """Insert rows without idempotency keys with one `INSERT ... SELECT FROM unnest(...)`
    per 1,000 rows (PostgreSQL): one array per column, so the statement text is the same
    for every batch (psycopg parses and prepares it once; a VALUES list with 13,000
    placeholders cost more to parse than the insert).

    Args:
        rows: column values as `dispatching.build_row` makes them, all with the same columns.

    Returns:
        The new ids in input order (the rows are inserted in `ordinality` order, and the
        id sequence rises with them).

    Raises:
        IntegrityError: a constraint refused a row (a parent that does not exist).
    """
    columns = tuple(rows[0])
    sql = _unnest_sql(columns, conn.dialect)
    ids: list[int] = []
    for start in range(0, len(rows), 1000):
        batch = rows[start:start + 1000]
        params = {f"a_{c}": [r[c] for r in batch] for c in columns}
        ids += sorted(r[0] for r in conn.exec_driver_sql(sql, params))
    return ids


@functools.lru_cache(maxsize=8)
def _unnest_sql(columns: tuple[str, ...], dialect: Any) -> str:
    arrays = ", ".join(f"%(a_{c})s::{q.c[c].type.compile(dialect=dialect)}[]" for c in columns)
    names = ", ".join(columns)
    return (f"INSERT INTO {TABLE} ({names}) SELECT {names} FROM unnest({arrays}) "
            f"WITH ORDINALITY AS t({names}, n) ORDER BY n RETURNING id")
