"""Statements on `cronjob_queue`: insert, claim, finish, renew, read."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import Connection, and_, func, or_, select

from ..errors import InvalidJob, StoreError
from ..models import cronjob_queue as q
from ..status import Status
from . import hotpath
from .dialect import db_now, locking_read, name, skip_locked

JOB_COLUMNS = tuple(c.name for c in q.columns)


def insert_job(conn: Connection, values: dict) -> tuple[dict, bool]:
    """Insert one row, or find the row that holds its idempotency key.

    Args:
        conn: a connection inside the caller's transaction.
        values: column values (payload already JSON text, times naive UTC).

    Returns:
        `(row, created)`: `row` has `id`, `status` and `payload` of the new or existing
        row; `created` is False when the key was taken. A concurrent inserter of the same
        key makes this wait for its transaction: if it commits we return its row, if it
        rolls back we insert ours. (Driver SQL: `store.hotpath.insert_row`.)
    """
    key = values.get("idempotency_key")
    for _ in range(5):
        new_id = hotpath.insert_row(conn, values)
        if new_id is not None:
            return {"id": new_id, "status": values.get("status", Status.PENDING),
                    "payload": values.get("payload")}, True
        existing = select_by_key(conn, key)
        if existing is not None:
            return existing, False
        # The holder of the key was deleted between our insert and our read: try again.
    raise InvalidJob(f"idempotency key {key!r} kept changing hands; giving up")


def select_by_key(conn: Connection, key: str) -> dict | None:
    """Return `{id, status, payload}` of the row holding `key` (latest committed), or None."""
    stmt = locking_read(conn, select(q.c.id, q.c.status, q.c.payload)
                        .where(q.c.idempotency_key == key))
    row = conn.execute(stmt).mappings().first()
    return dict(row) if row else None


def insert_jobs(conn: Connection, rows: Sequence[dict]) -> list[int]:
    """Insert many rows without idempotency keys; return their ids in input order.

    MariaDB and PostgreSQL use driver SQL (`hotpath.insert_rows_mysql`,
    `hotpath.insert_rows_postgresql`: ~20,000 rows/s against ~10,000 through Core's
    insertmanyvalues); SQLite the Core multi-row insert.

    Raises:
        IntegrityError: a constraint refused a row (nothing of the batch is kept by the
            caller's transaction).
    """
    if not rows:
        return []
    dialect = name(conn)
    if dialect != "sqlite" and len({tuple(r) for r in rows}) == 1:
        insert = (hotpath.insert_rows_mysql if dialect == "mysql"
                  else hotpath.insert_rows_postgresql)
        return insert(conn, list(rows))
    stmt = q.insert().returning(q.c.id, sort_by_parameter_order=True)
    return [r[0] for r in conn.execute(stmt, list(rows))]


def get_job(conn: Connection, job_id: int, columns: Iterable[str] | None = None) -> dict | None:
    """Return the row `job_id` as a dict of `columns` (all when None), or None.

    Raises:
        InvalidJob: a column name is not a column of `cronjob_queue`.
    """
    cols = _columns(columns)
    row = conn.execute(select(*cols).where(q.c.id == job_id)).mappings().first()
    return dict(row) if row else None


def list_jobs(conn: Connection, *, status: str | None = None, type: str | None = None,
              parent_id: int | None = None, limit: int = 50, offset: int = 0,
              columns: Iterable[str] | None = None) -> list[dict]:
    """Rows filtered by status/type/parent, newest first, paginated by `limit`/`offset`."""
    stmt = select(*_columns(columns)).order_by(q.c.id.desc()).limit(limit).offset(offset)
    if status:
        stmt = stmt.where(q.c.status == status)
    if type:
        stmt = stmt.where(q.c.type == type)
    if parent_id is not None:
        stmt = stmt.where(q.c.parent_id == parent_id)
    return [dict(r) for r in conn.execute(stmt).mappings()]


def _columns(columns: Iterable[str] | None) -> list:
    if columns is None:
        return list(q.columns)
    names = list(columns)
    unknown = [c for c in names if c not in q.c]
    if unknown:
        raise InvalidJob(f"unknown column {unknown[0]!r}; columns are: {', '.join(JOB_COLUMNS)}")
    return [q.c[c] for c in names]


def _due(now: datetime):
    return or_(q.c.scheduled_at.is_(None), q.c.scheduled_at <= now)


def claim_next(conn: Connection, queue: str, now: datetime, worker_id: str,
               lease_seconds: Callable[[str], float]) -> dict | None:
    """Claim the best due `pending` row of `queue`: lowest priority, then oldest.

    The row is picked with FOR UPDATE SKIP LOCKED (MariaDB, PostgreSQL) and taken by a
    conditional UPDATE (`status='pending'` -> `running`, attempts + 1, lease set), so two
    workers never claim the same row.

    Args:
        lease_seconds: maps a job type to its lease length (MAX_RUNTIME + grace), seconds.

    Returns:
        The claimed row as a dict (after the update), or None when nothing is due.
    """
    stmt = (select(q).where(q.c.queue == queue, q.c.status == Status.PENDING, _due(now))
            .order_by(q.c.priority, q.c.id).limit(1))
    row = conn.execute(skip_locked(conn, stmt)).mappings().first()
    if row is None:
        return None
    return _take(conn, dict(row), now, worker_id, lease_seconds(row["type"]))


def claim_batch(conn: Connection, queue: str, now: datetime, worker_id: str,
                lease_seconds: Callable[[str], float], limit: int) -> list[dict]:
    """Claim up to `limit` due `pending` rows of `queue` at once, best first.

    One locking SELECT (`ORDER BY priority, id LIMIT n FOR UPDATE SKIP LOCKED` on MariaDB
    and PostgreSQL; SQLite has one writer at a time) and one conditional UPDATE per lease
    length (usually one), so a worker with n idle slots pays two statements and one
    commit for n jobs, and priority order holds across the batch. The `Job` columns are
    read; the large `result_payload` is not. (Driver SQL: `store.hotpath`.)

    Args:
        lease_seconds: maps a job type to its lease length (MAX_RUNTIME + grace), seconds.
        limit: at most this many rows (the caller's idle slots).

    Returns:
        The claimed rows as dicts (after the update), in claim order; empty when nothing
        is due.
    """
    rows = hotpath.select_due(conn, queue, now, limit)
    if not rows:
        return []
    by_lease: dict[float, list[int]] = {}
    for row in rows:
        row["lease"] = lease_seconds(row["type"])
        by_lease.setdefault(row["lease"], []).append(row["id"])
    taken = sum(hotpath.take(conn, ids, now, worker_id, lease)
                for lease, ids in by_lease.items())
    if taken != len(rows):  # cannot happen under the row locks; never hand out a row twice
        raise StoreError(f"claimed {taken} of {len(rows)} locked rows of queue {queue!r}")
    changes = {"status": Status.RUNNING, "started_at": now, "finished_at": None,
               "worker_id": worker_id, "updated_at": now}
    for row in rows:
        row.update(changes, attempts=row["attempts"] + 1,
                   locked_until=now + timedelta(seconds=row.pop("lease")))
    return rows


def claim_by_id(conn: Connection, job_id: int, now: datetime, worker_id: str,
                lease_seconds: Callable[[str], float]) -> dict | None:
    """Claim row `job_id` if it is `pending` (due or not); None if it is not pending."""
    stmt = select(q).where(q.c.id == job_id, q.c.status == Status.PENDING)
    if name(conn) != "sqlite":
        stmt = stmt.with_for_update()
    row = conn.execute(stmt).mappings().first()
    if row is None:
        return None
    return _take(conn, dict(row), now, worker_id, lease_seconds(row["type"]))


def _take(conn: Connection, row: dict, now: datetime, worker_id: str,
          lease: float) -> dict | None:
    # The lease is set from the database's clock (docs/architecture.md, "Time").
    changes = {"status": Status.RUNNING, "attempts": row["attempts"] + 1, "started_at": now,
               "finished_at": None, "worker_id": worker_id, "updated_at": now}
    result = conn.execute(q.update().where(q.c.id == row["id"], q.c.status == Status.PENDING)
                          .values(locked_until=db_now(conn, lease), **changes))
    if result.rowcount != 1:
        return None
    row.update(changes, locked_until=now + timedelta(seconds=lease))  # as seen by this host
    return row


def finish_job(conn: Connection, job_id: int, attempt: int, values: dict) -> bool:
    """Write the outcome of run number `attempt` of row `job_id`.

    Only a row still `running` under that attempt is changed: a run whose lease was
    taken away by `recover_stale` cannot overwrite the newer run.

    Args:
        values: column values; texts already within their limits (`cronjobs.limits`),
            `process_logs` the whole bounded log.

    Returns:
        True when the row was updated.
    """
    return hotpath.finish(conn, job_id, attempt, values)


def finish_many(conn: Connection, items: list[tuple[int, int, dict]]) -> set[int]:
    """Write many outcomes at once: `(job_id, attempt, values)` each, fenced like
    `finish_job`. Returns the ids written. (Driver SQL: `store.hotpath`.)"""
    return hotpath.finish_many(conn, items) if items else set()


def delete_job(conn: Connection, job_id: int, attempt: int | None = None) -> bool:
    """Delete row `job_id` if it has no children. True when deleted.

    With `attempt`, only while that run still holds it (`running`, same attempt). The row
    is locked first, so a child inserted meanwhile (its foreign-key check waits for our
    lock) is seen, and the row is kept: a delete never cascades to live rows.
    """
    stmt = select(q.c.id).where(q.c.id == job_id)
    if attempt is not None:
        stmt = stmt.where(q.c.status == Status.RUNNING, q.c.attempts == attempt)
    if name(conn) != "sqlite":
        stmt = stmt.with_for_update()
    if conn.execute(stmt).first() is None or count_children(conn, job_id):
        return False
    return conn.execute(q.delete().where(q.c.id == job_id)).rowcount == 1


def count_children(conn: Connection, job_id: int) -> int:
    """Number of rows whose parent is `job_id`."""
    return conn.execute(select(func.count()).select_from(q)
                        .where(q.c.parent_id == job_id)).scalar_one()


def renew_leases(conn: Connection, leases: Iterable[tuple[int, int, float]]) -> int:
    """Extend the leases of running rows: `(id, attempt, lease_seconds)` triples; each
    lease then ends `lease_seconds` after the database's clock now.

    Returns:
        How many rows were still held by those runs and got the new lease.
    """
    renewed = 0
    for job_id, attempt, lease in leases:
        result = conn.execute(q.update().where(and_(q.c.id == job_id, q.c.status == Status.RUNNING,
                                                    q.c.attempts == attempt))
                              .values(locked_until=db_now(conn, lease)))
        renewed += result.rowcount
    return renewed
