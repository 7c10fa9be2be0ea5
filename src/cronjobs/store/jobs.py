"""Reads of `cronjob_queue` rows: one row, the holder of a key, a row's children."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, func, select

from ..errors import InvalidJob
from ..models import cronjob_queue as q
from .sql import locking_read

JOB_COLUMNS = tuple(c.name for c in q.columns)


def get_job(conn: Connection, job_id: int, columns: Iterable[str] | None = None) -> dict | None:
    """Return the row `job_id` as a dict of `columns` (all when None), or None.

    Raises:
        InvalidJob: a column name is not a column of `cronjob_queue`.
    """
    cols = _columns(columns)
    row = conn.execute(select(*cols).where(q.c.id == job_id)).mappings().first()
    return dict(row) if row else None


def select_by_key(conn: Connection, key: str) -> dict | None:
    """Return `{id, status, payload}` of the row holding `key` (latest committed), or None."""
    stmt = locking_read(conn, select(q.c.id, q.c.status, q.c.payload)
                        .where(q.c.idempotency_key == key))
    row = conn.execute(stmt).mappings().first()
    return dict(row) if row else None


def count_children(conn: Connection, job_id: int) -> int:
    """Number of rows whose parent is `job_id`."""
    return conn.execute(select(func.count()).select_from(q)
                        .where(q.c.parent_id == job_id)).scalar_one()


def _columns(columns: Iterable[str] | None) -> list:
    if columns is None:
        return list(q.columns)
    names = list(columns)
    unknown = [c for c in names if c not in q.c]
    if unknown:
        raise InvalidJob(f"unknown column {unknown[0]!r}; columns are: {', '.join(JOB_COLUMNS)}")
    return [q.c[c] for c in names]
