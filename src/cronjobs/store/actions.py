"""Operator actions on rows (dashboard buttons, bulk operations): retry, cancel.

Each takes a list of ids (or one id) and changes only the rows still in the state it
expects; a bulk operation (`cronjobs.bulk`) calls one per batch."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, bindparam, select

from .. import limits
from ..models import cronjob_queue as q
from ..status import Status


def retry_failed(conn: Connection, ids: list[int], now: datetime,
                 who: str = "operator") -> list[dict]:
    """Put the rows of `ids` that are still `failed` back to `pending`, due now, with their
    attempts reset to 0; each gets a process-log line naming `who`.

    Rows that are no longer `failed` (retried, deleted or changed by someone else
    meanwhile) are left alone. The failed rows are locked first (in id order), so each is
    reset by exactly one caller, and then updated with one executemany: at 500 rows a
    batch this costs a few statements, not 500 compiled UPDATEs. Keep `ids` under 1,000:
    MariaDB turns a longer IN list into a derived table and scans for it.

    Args:
        ids: row ids (a batch of a bulk operation, or one row).
        now: naive UTC, for `updated_at` and the log line.
        who: who asked, for the log line (`dashboard (operation 12)`).

    Returns:
        `[{id, queue}]` of the rows changed (to be sent to the broker after commit).
    """
    if not ids:
        return []
    rows = conn.execute(select(q.c.id, q.c.queue, q.c.process_logs)
                        .where(q.c.id.in_(ids), q.c.status == Status.FAILED)
                        .order_by(q.c.id).with_for_update()).mappings().all()
    if not rows:
        return []
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    line = limits.log_line(f"[{stamp}] retried by {who}: failed -> pending, attempts reset") + "\n"
    conn.execute(q.update().where(q.c.id == bindparam("b_id"), q.c.status == Status.FAILED).values(
        status=Status.PENDING, attempts=0, scheduled_at=None, started_at=None, finished_at=None,
        locked_until=None, updated_at=now, process_logs=bindparam("b_log")),
        [{"b_id": r["id"], "b_log": limits.bounded_log(r["process_logs"], line)} for r in rows])
    return [{"id": r["id"], "queue": r["queue"]} for r in rows]


def cancel_pending(conn: Connection, job_id: int, now: datetime, who: str = "operator") -> bool:
    """Cancel row `job_id` if it is still `pending` (a running row is not touched).

    Returns:
        True when the row was cancelled.
    """
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    old = conn.execute(select(q.c.process_logs).where(q.c.id == job_id)).scalar_one_or_none()
    result = conn.execute(q.update().where(q.c.id == job_id, q.c.status == Status.PENDING).values(
        status=Status.CANCELLED, finished_at=now, updated_at=now, locked_until=None,
        process_logs=limits.bounded_log(
            old, limits.log_line(f"[{stamp}] cancelled by {who}") + "\n")))
    return result.rowcount == 1
