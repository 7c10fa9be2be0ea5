"""Upkeep statements: rescue stale rows, find undelivered rows, prune old rows."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, exists, select
from sqlalchemy.orm import aliased

from ..models import cronjob_queue as q, cronjob_slot
from .dialect import skip_locked
from .jobs import log_append


def rescue_stale(conn: Connection, now: datetime, minutes: float, limit: int = 500) -> list[dict]:
    """Take back `running` rows whose lease ran out more than `minutes` ago.

    A row with attempts left goes back to `pending` (due now); one without goes to
    `failed`. Both get a process-log line. Rows with a live lease are never touched, so a
    long job on a live worker (which renews its lease) is safe.

    Returns:
        `[{id, queue, status}]` for each row changed (`status` is the new status).
    """
    cutoff = now - timedelta(minutes=minutes)
    stmt = (select(q.c.id, q.c.queue, q.c.attempts, q.c.max_attempts, q.c.worker_id)
            .where(q.c.status == "running", q.c.locked_until < cutoff)
            .order_by(q.c.id).limit(limit))
    changed = []
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    for row in conn.execute(skip_locked(conn, stmt)).mappings().all():
        exhausted = row["attempts"] >= row["max_attempts"]
        status = "failed" if exhausted else "pending"
        error = (f"lease expired on worker {row['worker_id']} (worker lost?)"
                 + (f"; no attempts left ({row['attempts']}/{row['max_attempts']})"
                    if exhausted else ""))
        values = {"status": status, "error": error, "locked_until": None, "updated_at": now,
                  "process_logs": log_append(f"[{stamp}] recover-stale: {error} -> {status}\n")}
        if exhausted:
            values["finished_at"] = now
        else:
            values["scheduled_at"] = now
        result = conn.execute(q.update().where(q.c.id == row["id"], q.c.status == "running",
                                               q.c.attempts == row["attempts"]).values(**values))
        if result.rowcount == 1:
            changed.append({"id": row["id"], "queue": row["queue"], "status": status})
    return changed


def due_pending(conn: Connection, now: datetime, idle_seconds: float, limit: int = 1000,
                queues: list[str] | None = None) -> list[dict]:
    """Pending rows due for longer than `idle_seconds`: their message may be lost.

    Returns:
        `[{id, queue}]`, oldest first, at most `limit`.
    """
    cutoff = now - timedelta(seconds=idle_seconds)
    stmt = (select(q.c.id, q.c.queue).where(q.c.status == "pending", q.c.updated_at <= cutoff)
            .where((q.c.scheduled_at.is_(None)) | (q.c.scheduled_at <= cutoff))
            .order_by(q.c.priority, q.c.id).limit(limit))
    if queues:
        stmt = stmt.where(q.c.queue.in_(queues))
    return [dict(r) for r in conn.execute(stmt).mappings()]  # a plain read: never lock


def prune(conn: Connection, now: datetime, *, completed_days: float, failed_days: float,
          cancelled_days: float, batch: int, dry_run: bool = False) -> dict[str, int]:
    """Delete one batch per status of rows finished longer ago than their retention.

    `cancelled` rows are kept while they have children younger than the retention (a
    childless cancelled row is deleted when it ends). Call repeatedly until it returns
    zeros; each call holds locks for one bounded batch only.

    Returns:
        `{"completed": n, "failed": n, "cancelled": n}` rows deleted (or that would be,
        with `dry_run`, counted up to `batch`).
    """
    counts = {}
    for status, days in (("completed", completed_days), ("failed", failed_days),
                         ("cancelled", cancelled_days)):
        cutoff = now - timedelta(days=days)
        stmt = (select(q.c.id).where(q.c.status == status, q.c.finished_at < cutoff)
                .order_by(q.c.id).limit(batch))
        if status == "cancelled":
            child = aliased(q)
            stmt = stmt.where(~exists().where(child.c.parent_id == q.c.id,
                                              child.c.status.in_(("pending", "running"))))
        ids = [r[0] for r in conn.execute(stmt)]
        if ids and not dry_run:
            conn.execute(q.delete().where(q.c.id.in_(ids)))
        counts[status] = len(ids)
    return counts


def prune_slots(conn: Connection, now: datetime, days: float = 400) -> int:
    """Delete slot records older than `days` (a yearly cron needs a year of them)."""
    cutoff = now - timedelta(days=days)
    return conn.execute(cronjob_slot.delete().where(cronjob_slot.c.claimed_at < cutoff)).rowcount
