"""Operator actions on rows (dashboard buttons, `cronjobs failed --retry`): retry, cancel."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select

from .. import limits
from ..models import cronjob_queue as q


def retry_failed(conn: Connection, ids: list[int], now: datetime, who: str = "operator") -> list[dict]:
    """Put `failed` rows back to `pending`, due now, with their attempts reset to 0.

    Rows that are no longer `failed` (retried by someone else meanwhile) are left alone.
    Each row gets a process-log line naming `who`.

    Returns:
        `[{id, queue}]` of the rows changed (to be sent to the broker after commit).
    """
    if not ids:
        return []
    rows = conn.execute(select(q.c.id, q.c.queue, q.c.process_logs)
                        .where(q.c.id.in_(ids), q.c.status == "failed")).mappings().all()
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    changed = []
    for row in rows:
        result = conn.execute(q.update().where(q.c.id == row["id"], q.c.status == "failed").values(
            status="pending", attempts=0, scheduled_at=None, started_at=None, finished_at=None,
            locked_until=None, updated_at=now,
            process_logs=limits.bounded_log(row["process_logs"], limits.log_line(
                f"[{stamp}] retried by {who}: failed -> pending, attempts reset") + "\n")))
        if result.rowcount == 1:
            changed.append({"id": row["id"], "queue": row["queue"]})
    return changed


def cancel_pending(conn: Connection, job_id: int, now: datetime, who: str = "operator") -> bool:
    """Cancel row `job_id` if it is still `pending` (a running row is not touched).

    Returns:
        True when the row was cancelled.
    """
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    old = conn.execute(select(q.c.process_logs).where(q.c.id == job_id)).scalar_one_or_none()
    result = conn.execute(q.update().where(q.c.id == job_id, q.c.status == "pending").values(
        status="cancelled", finished_at=now, updated_at=now, locked_until=None,
        process_logs=limits.bounded_log(old, limits.log_line(f"[{stamp}] cancelled by {who}") + "\n")))
    return result.rowcount == 1
