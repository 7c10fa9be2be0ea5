"""Reads per queue, shared by `health`, `/metrics`, the Workers page and the Overview: which
queues hold pending rows, due rows and the oldest due time per queue, row counts per
queue and status, and what a burst left pending (`pending_split`). Each is a range of the
claim index `(queue, status, priority, id)`, and every count but the burst's is capped, so
they stay cheap at millions of rows (`tests/test_dashboard_explain.py` runs `EXPLAIN` on
them).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, func, select

from ..status import Status
from .models import cronjob_queue as q
from .sql import due
from .views import COUNT_CAP, capped_count

DUE_CAP = 1_000


def pending_queues(conn: Connection) -> list[str]:
    """Queues that hold `pending` rows: a loose scan of the claim index, named for MariaDB
    (alone it read every pending row through `(status, id)`)."""
    stmt = select(q.c.queue).where(q.c.status == Status.PENDING).group_by(q.c.queue)
    for dialect in ("mysql", "mariadb"):
        stmt = stmt.with_hint(q, "FORCE INDEX (ix_cronjob_queue_claim)", dialect_name=dialect)
    return [r[0] for r in conn.execute(stmt)]


def due_by_queue(conn: Connection, now: datetime, cap: int = DUE_CAP,
                 queues: set[str] | None = None, other: str = "other") -> dict[str, dict]:
    """Due `pending` rows per queue: count (capped) and the oldest due time.

    Shared by `health`, `/metrics` and the Workers page (queues with due rows and no
    live worker). The oldest due time is taken among the first `cap` due rows in claim
    order (priority, then id), so it is exact unless more than `cap` rows wait.

    Args:
        queues: when given, only these queues are reported one by one; the pending rows
            of every other queue are read together (one statement, `queue IN (...)`) and
            reported under `other`, so `/metrics` runs a bounded number of statements and
            labels whatever queue names the rows hold.

    Returns:
        `{queue: {"due": n, "capped": bool, "oldest_due_at": naive UTC or None}}` for
        every queue with pending rows.
    """
    out = {}
    present = pending_queues(conn)
    for queue in present:
        if queues is None or queue in queues:
            out[queue] = due_in_queues(conn, now, [queue], cap)
    rest = [queue for queue in present if queues is not None and queue not in queues]
    if rest:
        out[other] = due_in_queues(conn, now, rest, cap)
    return out


def due_in_queues(conn: Connection, now: datetime, queues: list[str], cap: int = DUE_CAP) -> dict:
    """Due `pending` rows of `queues` (the first `cap` in claim order when one queue):
    `{"due": n, "capped": bool, "oldest_due_at": naive UTC or None}`."""
    due_at = func.coalesce(q.c.scheduled_at, q.c.created_at)
    inner = select(due_at.label("due_at")).where(
        q.c.queue == queues[0] if len(queues) == 1 else q.c.queue.in_(queues),
        due(now))
    if len(queues) == 1:  # the claim index's order: the first `cap` rows a worker would take
        inner = inner.order_by(q.c.priority, q.c.id)
    inner = inner.limit(cap + 1).subquery()
    n, oldest = conn.execute(select(func.count(), func.min(inner.c.due_at))).one()
    return {"due": min(n, cap), "capped": n > cap, "oldest_due_at": oldest}


def rows_by_queue_status(conn: Connection,
                         statuses: tuple[str, ...] = (Status.PENDING, Status.RUNNING,
                                                      Status.FAILED),
                         cap: int = COUNT_CAP, queues: set[str] | None = None,
                         other: str = "other") -> dict[tuple[str, str], int]:
    """Row counts per (queue, status) for the live states (each capped at `cap`).

    Args:
        queues: when given, only these queues are counted one by one; the rows of every
            other queue are counted together (`queue IN (...)` on the claim index, one
            statement per status) under `other`.
    """
    out = {}
    present = _queues(conn)
    rest = [queue for queue in present if queues is not None and queue not in queues]
    for queue in present:
        if queues is None or queue in queues:
            for status in statuses:
                out[(queue, status)] = capped_count(conn, q.c.queue == queue, q.c.status == status,
                                                    cap=cap)[0]
    for status in statuses if rest else ():
        out[(other, status)] = capped_count(conn, q.c.queue.in_(rest), q.c.status == status,
                                            cap=cap)[0]
    return out


def _queues(conn: Connection) -> list[str]:
    return [r[0] for r in conn.execute(select(q.c.queue).group_by(q.c.queue))]


def pending_split(conn: Connection, now: datetime, queues: list[str]) -> tuple[int, int]:
    """`pending` rows of `queues`, split at `now` (naive UTC): `(scheduled_later, due)`.
    Due rows that a claim did not return are held (blocked, paused or limited). Two
    counts over the claim index range `(queue, status)`, not capped: a burst reports
    exact figures for its own queues."""
    if not queues:
        return 0, 0
    where = (q.c.queue.in_(queues), q.c.status == Status.PENDING)
    total = conn.execute(select(func.count()).where(*where)).scalar_one()
    due_now = conn.execute(select(func.count()).where(q.c.queue.in_(queues), due(now))
                           ).scalar_one()
    return total - due_now, due_now
