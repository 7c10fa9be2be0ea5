"""Statements on `cronjob_runtime` (task state, kill switch) and `cronjob_slot` (slot claims)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select

from ..models import cronjob_runtime as rt, cronjob_slot
from .dialect import insert_ignore


def ensure_runtime(conn: Connection, task: str, job_type: str, enabled: bool,
                   now: datetime) -> None:
    """Create the runtime row of `task` if it does not exist (never changes an existing one)."""
    stmt = insert_ignore(conn, rt, ["task"]).values(task=task, type=job_type, enabled=enabled,
                                                     updated_at=now)
    conn.execute(stmt)


def get_runtime(conn: Connection, task: str) -> dict | None:
    """The runtime row of `task` as a dict, or None."""
    row = conn.execute(select(rt).where(rt.c.task == task)).mappings().first()
    return dict(row) if row else None


def list_runtimes(conn: Connection) -> dict[str, dict]:
    """All runtime rows, keyed by task name."""
    return {r["task"]: dict(r) for r in conn.execute(select(rt)).mappings()}


def claim_slot(conn: Connection, task: str, slot: str, now: datetime) -> bool:
    """Claim `(task, slot)` by inserting its unique record. True if this caller won.

    A concurrent claimer waits for the winner's transaction: if it commits, the loser
    gets False; if it rolls back, the loser inserts and wins. A conflict is the normal
    "already done" answer, not an error.
    """
    stmt = insert_ignore(conn, cronjob_slot, ["task", "slot"]).values(task=task, slot=slot,
                                                                      claimed_at=now)
    # psycopg 3 drops an INSERT's rowcount (-1) unless SQLAlchemy is asked to keep it.
    return conn.execute(stmt.execution_options(preserve_rowcount=True)).rowcount == 1


def record_run(conn: Connection, task: str, *, slot: str | None, job_id: int, now: datetime,
               next_run_at: datetime | None) -> None:
    """Note a started run of `task` (scheduled when `slot` is set, manual otherwise)."""
    values = {"last_job_id": job_id, "last_status": "pending", "updated_at": now}
    if slot is not None:
        values.update(last_slot=slot, last_run_at=now, next_run_at=next_run_at)
        conn.execute(cronjob_slot.update()
                     .where(cronjob_slot.c.task == task, cronjob_slot.c.slot == slot)
                     .values(job_id=job_id))
    conn.execute(rt.update().where(rt.c.task == task).values(**values))


def set_enabled(conn: Connection, task: str, enabled: bool, now: datetime) -> bool:
    """Flip the kill switch of `task`. True if the task has a runtime row."""
    result = conn.execute(rt.update().where(rt.c.task == task)
                          .values(enabled=enabled, updated_at=now))
    return result.rowcount == 1


def update_task_status(conn: Connection, job_id: int, status: str, now: datetime) -> None:
    """Copy a finished job's status to the task whose last job it is."""
    conn.execute(rt.update().where(rt.c.last_job_id == job_id)
                 .values(last_status=status, updated_at=now))
