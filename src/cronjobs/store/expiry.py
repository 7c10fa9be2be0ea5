"""Expiry: `pending` rows whose `expires_at` has passed end `expired`.

The claim never takes such a row (`sql.due_sql`, `sql.not_expired_sql`); the worker's
sweep (`cronjobs.job.expiry.expire`) ends them here, in one transaction with the rows
they release (`family.settle.after_finish`). An expired row keeps its attempts (none was
used), gets `finished_at`, the reason `expired`, the error `not started by its deadline
<time> UTC` and a process-log line. A task's scheduled run that expires is counted as a
skip of its slot (`runtime.record_skips`, reason `expired`), as the scheduler records a
slot that started nothing.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, bindparam, select

from .. import limits
from ..status import Reason, Status
from .models import cronjob_queue as q
from .models import cronjob_runtime as rt
from .runtime import record_skips
from .sql import skip_locked

SKIP_REASON = "expired"  # `cronjob_runtime.last_skip_reason` of a slot whose row expired
# The idempotency key of a task's scheduled run, as `schedule.scheduler` writes it:
# `cronjobs:<task>:<slot key>` (slot keys have no colon; manual runs' keys say `manual`).
SLOT_KEY_PREFIX = "cronjobs:"


def deadline_text(expires_at: datetime) -> str:
    """The error of an expired row: `not started by its deadline 2027-01-01 10:02:00 UTC`."""
    return f"not started by its deadline {expires_at:%Y-%m-%d %H:%M:%S} UTC"


def task_slot(key: str | None) -> tuple[str, str] | None:
    """`(task, slot key)` of a scheduled run's idempotency key; None for any other row."""
    if not key or not key.startswith(SLOT_KEY_PREFIX):
        return None
    task, _, slot = key[len(SLOT_KEY_PREFIX):].rpartition(":")
    if not task or not slot or task.endswith(":manual"):
        return None
    return task, slot


def expire_pending(conn: Connection, now: datetime, limit: int = 500,
                   queues: list[str] | None = None) -> list[dict]:
    """End the `pending` rows whose `expires_at` is at or before `now` (naive UTC, the
    clock the claim judges with): `expired`, in the caller's transaction.

    The candidates come from `ix_cronjob_queue_status_expires`, oldest deadline first,
    locked with SKIP LOCKED (a row a claim holds is being taken: not ours); the UPDATE
    checks `pending` again. Tasks whose last run one is show `expired`; the slot of a
    scheduled run is recorded as skipped (`SKIP_REASON`). The rows are locked (SQLite: one
    writer at a time), so the UPDATE's `pending` check keeps every one.

    Args:
        limit: rows ended per call, at most.
        queues: only rows of these queues (None: all).

    Returns:
        `[{id, queue, type, root_id, idempotency_key, status, callback_url, attempts,
        max_attempts, error, outcome_reason}]` of the rows ended.
    """
    stmt = (select(q.c.id, q.c.queue, q.c.type, q.c.root_id, q.c.idempotency_key,
                   q.c.expires_at, q.c.process_logs,
                   q.c.callback_url, q.c.attempts, q.c.max_attempts)
            .where(q.c.status == Status.PENDING, q.c.expires_at <= now)
            .order_by(q.c.expires_at, q.c.id).limit(limit))
    if queues:
        stmt = stmt.where(q.c.queue.in_(queues))
    rows = conn.execute(skip_locked(conn, stmt)).mappings().all()
    if not rows:
        return []
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    conn.execute(q.update().where(q.c.id == bindparam("b_id"),
                                         q.c.status == Status.PENDING)
                        .values(status=Status.EXPIRED, finished_at=now, updated_at=now,
                                locked_until=None, outcome_reason=Reason.EXPIRED,
                                error=bindparam("b_error"), process_logs=bindparam("b_log")),
                        [{"b_id": r["id"], "b_error": deadline_text(r["expires_at"]),
                          "b_log": limits.bounded_log(r["process_logs"], limits.log_line(
                              f"[{stamp}] {deadline_text(r['expires_at'])}: "
                              f"pending -> expired, not run") + "\n")} for r in rows])
    ids = [r["id"] for r in rows]
    conn.execute(rt.update().where(rt.c.last_job_id.in_(ids)).values(
        last_status=Status.EXPIRED, updated_at=now))
    slots = [pair for pair in (task_slot(r["idempotency_key"]) for r in rows) if pair]
    if slots:
        record_skips(conn, slots, SKIP_REASON, now)
    return [_ended(r) for r in rows]


def _ended(r) -> dict:
    """What `expire_pending` returns of expired row `r`; its webhook's columns too (a row
    that ends without a run, `family.unrun`)."""
    return {"id": r["id"], "queue": r["queue"], "type": r["type"], "root_id": r["root_id"],
            "idempotency_key": r["idempotency_key"], "status": Status.EXPIRED,
            "callback_url": r["callback_url"], "attempts": r["attempts"],
            "max_attempts": r["max_attempts"], "error": deadline_text(r["expires_at"]),
            "outcome_reason": Reason.EXPIRED}
