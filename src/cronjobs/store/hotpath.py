"""The statements every job pays for — its insert, the claim and the finish — and the
scheduler's per-tick bookkeeping, as driver SQL.

Everything else in the store is SQLAlchemy Core. These run thousands of times a second,
where building and compiling a Core statement, its cache key and the result processing
cost more CPU than the database spends on them (docs/performance.md). So they are plain
SQL per dialect, sent with `exec_driver_sql`: same connection, same transaction, the
same rules as the Core versions they replace (fencing by status and attempt, leases on
the database's clock, `FOR UPDATE SKIP LOCKED` where there are row locks).

Dialects differ in three places, handled here: the placeholder style (`%(name)s` for
PyMySQL and psycopg, `:name` for sqlite3), the database-clock expression of a lease, and
SQLite's text storage of times (SQLAlchemy's format, parsed back on read).
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from ..models import cronjob_queue as q
from .dialect import name

TABLE = q.name
# What a claim reads: every column but the stored result (a job never needs it to run).
CLAIM_COLUMNS = tuple(c.name for c in q.columns if c.name != "result_payload")
_TIME_COLUMNS = frozenset(c.name for c in q.columns if c.type.python_type is datetime)
_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # SQLAlchemy's storage format for DateTime


def _ph(dialect: str, key: str) -> str:
    return f":{key}" if dialect == "sqlite" else f"%({key})s"


def _lease_sql(dialect: str) -> str:
    """The database clock plus the bound lease (see `dialect.db_now`)."""
    if dialect == "mysql":
        return f"TIMESTAMPADD(MICROSECOND, {_ph(dialect, 'lease')}, UTC_TIMESTAMP(6))"
    if dialect == "postgresql":
        return f"timezone('UTC', statement_timestamp()) + {_ph(dialect, 'lease')}"
    return "strftime('%Y-%m-%d %H:%M:%f', 'now', :lease) || '000'"


def lease_value(dialect: str, seconds: float) -> Any:
    """The value to bind for a lease of `seconds` in `dialect`."""
    if dialect == "mysql":
        return int(round(seconds * 1_000_000))
    if dialect == "postgresql":
        return timedelta(seconds=seconds)
    return f"{seconds:+.3f} seconds"


@functools.lru_cache(maxsize=8)
def _claim_select(dialect: str) -> str:
    ph = functools.partial(_ph, dialect)
    lock = "" if dialect == "sqlite" else " FOR UPDATE SKIP LOCKED"
    return (f"SELECT {', '.join(CLAIM_COLUMNS)} FROM {TABLE} "
            f"WHERE queue = {ph('queue')} AND status = 'pending' "
            f"AND (scheduled_at IS NULL OR scheduled_at <= {ph('now')}) "
            f"ORDER BY priority, id LIMIT {ph('limit')}{lock}")


@functools.lru_cache(maxsize=8)
def _claim_update(dialect: str) -> str:
    ph = functools.partial(_ph, dialect)
    return (f"UPDATE {TABLE} SET status = 'running', attempts = attempts + 1, "
            f"started_at = {ph('now')}, finished_at = NULL, worker_id = {ph('worker_id')}, "
            f"updated_at = {ph('now')}, locked_until = {_lease_sql(dialect)} "
            f"WHERE id IN ({{ids}}) AND status = 'pending'")


@functools.lru_cache(maxsize=64)
def _finish_update(dialect: str, columns: tuple[str, ...]) -> str:
    ph = functools.partial(_ph, dialect)
    sets = ", ".join(f"{c} = {ph('v_' + c)}" for c in columns)
    return (f"UPDATE {TABLE} SET {sets} WHERE id = {ph('job_id')} AND status = 'running' "
            f"AND attempts = {ph('attempt')}")


def _bind(dialect: str, value: Any) -> Any:
    if dialect == "sqlite" and isinstance(value, datetime):
        return value.strftime(_SQLITE_TIME)
    return value


def select_due(conn: Connection, queue: str, now: datetime, limit: int) -> list[dict]:
    """Lock (SKIP LOCKED) and read up to `limit` due pending rows of `queue`, best first."""
    dialect = name(conn)
    rows = conn.exec_driver_sql(_claim_select(dialect), {
        "queue": queue, "now": _bind(dialect, now), "limit": int(limit)}).all()
    found = [dict(zip(CLAIM_COLUMNS, row, strict=True)) for row in rows]
    if dialect == "sqlite":
        for row in found:
            for column in _TIME_COLUMNS.intersection(row):
                if isinstance(row[column], str):
                    row[column] = datetime.fromisoformat(row[column])
    return found


def take(conn: Connection, ids: list[int], now: datetime, worker_id: str,
         lease_seconds: float) -> int:
    """Mark the pending rows `ids` running for `worker_id` (attempt + 1, a lease of
    `lease_seconds` on the database's clock); returns how many were taken."""
    dialect = name(conn)
    sql = _claim_update(dialect).format(ids=", ".join(str(int(i)) for i in ids))
    return conn.exec_driver_sql(sql, {"now": _bind(dialect, now), "worker_id": worker_id,
                                      "lease": lease_value(dialect, lease_seconds)}).rowcount


def finish(conn: Connection, job_id: int, attempt: int, values: dict) -> bool:
    """Write `values` to row `job_id` if run `attempt` still holds it; True if it did."""
    dialect = name(conn)
    params = {f"v_{k}": _bind(dialect, v) for k, v in values.items()}
    params.update(job_id=job_id, attempt=attempt)
    sql = _finish_update(dialect, tuple(values))
    return conn.exec_driver_sql(sql, params).rowcount == 1


def finish_many(conn: Connection, items: list[tuple[int, int, dict]]) -> set[int]:
    """Write many outcomes with two statements: lock the rows their runs still hold, then
    one UPDATE with a `CASE id` per column. `items` are `(job_id, attempt, values)`.

    Returns:
        The ids written; the others' runs had lost their rows (fencing, as in `finish`).
    """
    dialect = name(conn)
    ids = ", ".join(str(int(job_id)) for job_id, _, _ in items)
    lock = "" if dialect == "sqlite" else " FOR UPDATE"
    held_now = dict(conn.exec_driver_sql(
        f"SELECT id, attempts FROM {TABLE} WHERE id IN ({ids}) AND status = 'running'{lock}").all())
    held = [(job_id, values) for job_id, attempt, values in items
            if held_now.get(job_id) == attempt]
    if not held:
        return set()
    ph = functools.partial(_ph, dialect)
    params: dict[str, Any] = {}
    columns = sorted({c for _, values in held for c in values})
    sets = []
    for column in columns:
        whens = []
        for n, (job_id, values) in enumerate(held):
            if column in values:
                params[f"v{n}_{column}"] = _bind(dialect, values[column])
                whens.append(f"WHEN {int(job_id)} THEN {ph(f'v{n}_{column}')}")
        sets.append(f"{column} = CASE id {' '.join(whens)} ELSE {column} END")
    written = ", ".join(str(int(job_id)) for job_id, _ in held)
    conn.exec_driver_sql(f"UPDATE {TABLE} SET {', '.join(sets)} WHERE id IN ({written})", params)
    return {job_id for job_id, _ in held}


def record_runs(conn: Connection, runs: list[tuple[str, str, int, datetime | None]],
                now: datetime) -> None:
    """Note many scheduled runs, `(task, slot, job_id, next_run_at)` each: the slot records
    this transaction inserted get their job ids, the runtime rows their last run; two
    statements with a `CASE task` per column, however many tasks a tick starts."""
    dialect = name(conn)
    ph = functools.partial(_ph, dialect)
    params: dict[str, Any] = {"now": _bind(dialect, now)}
    job_case, slot_case, next_case, tasks = [], [], [], []
    for n, (task, slot, job_id, next_at) in enumerate(runs):
        params.update({f"t{n}": task, f"s{n}": slot, f"n{n}": _bind(dialect, next_at)})
        tasks.append(ph(f"t{n}"))
        job_case.append(f"WHEN {ph(f't{n}')} THEN {int(job_id)}")
        slot_case.append(f"WHEN {ph(f't{n}')} THEN {ph(f's{n}')}")
        next_case.append(f"WHEN {ph(f't{n}')} THEN {ph(f'n{n}')}")
    in_tasks = ", ".join(tasks)
    jobs, slots, nexts = " ".join(job_case), " ".join(slot_case), " ".join(next_case)
    conn.exec_driver_sql(
        f"UPDATE cronjob_slot SET job_id = CASE task {jobs} END WHERE task IN ({in_tasks}) "
        f"AND job_id IS NULL AND slot = CASE task {slots} END", params)
    conn.exec_driver_sql(
        f"UPDATE cronjob_runtime SET last_job_id = CASE task {jobs} END, "
        f"last_slot = CASE task {slots} END, next_run_at = CASE task {nexts} END, "
        f"last_status = 'pending', updated_at = {ph('now')}, last_run_at = {ph('now')} "
        f"WHERE task IN ({in_tasks})", params)


@functools.lru_cache(maxsize=32)
def _insert_sql(dialect: str, columns: tuple[str, ...], keyed: bool) -> str:
    ph = functools.partial(_ph, dialect)
    sql = (f"INSERT INTO {TABLE} ({', '.join(columns)}) "
           f"VALUES ({', '.join(ph('v_' + c) for c in columns)})")
    if dialect == "mysql":
        return sql
    return sql + (" ON CONFLICT (idempotency_key) DO NOTHING" if keyed else "") + " RETURNING id"


def insert_row(conn: Connection, values: dict) -> int | None:
    """Insert one job row; its id, or None when its idempotency key is taken (the caller
    reads the holder). A concurrent inserter of the same key makes this wait for its
    transaction (the unique index), on every backend.

    MySQL/MariaDB: a duplicate-key error rolls back only the statement, not the caller's
    transaction (INSERT IGNORE would also silence foreign-key and truncation errors).

    Raises:
        IntegrityError: another constraint (a parent that does not exist).
    """
    from sqlalchemy.exc import IntegrityError

    from ..db import is_duplicate_key

    dialect = name(conn)
    columns = tuple(values)
    sql = _insert_sql(dialect, columns, values.get("idempotency_key") is not None)
    params = {f"v_{c}": _bind(dialect, v) for c, v in values.items()}
    if dialect != "mysql":
        row = conn.exec_driver_sql(sql, params).first()
        return row[0] if row else None
    try:
        return conn.exec_driver_sql(sql, params).lastrowid
    except IntegrityError as exc:
        if is_duplicate_key(exc):
            return None
        raise


# A multi-row INSERT stays well under the smallest `max_allowed_packet` we accept (4 MiB).
_MANY_MAX_BYTES = 2 * 1024 * 1024
_VARYING = frozenset({"payload", "title", "parent_id", "scheduled_at"})


def insert_rows_mysql(conn: Connection, rows: list[dict]) -> list[int]:
    """Insert rows without idempotency keys with multi-row `INSERT ... RETURNING id`
    (MariaDB), as literal SQL: PyMySQL escaping 13 bound values per row cost more than
    the server's insert, so values shared by the batch (type, queue, times ...) are
    escaped once and the rest one per row. Statements stay under 2 MiB.

    Args:
        rows: column values as `queue.build_row` makes them, all with the same columns.

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
    from sqlalchemy.exc import DBAPIError

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


def insert_rows_postgresql(conn: Connection, rows: list[dict]) -> list[int]:
    """Insert rows without idempotency keys with one `INSERT ... SELECT FROM unnest(...)`
    per 1,000 rows (PostgreSQL): one array per column, so the statement text is the same
    for every batch (psycopg parses and prepares it once; a VALUES list with 13,000
    placeholders cost more to parse than the insert).

    Args:
        rows: column values as `queue.build_row` makes them, all with the same columns.

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
