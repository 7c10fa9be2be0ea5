"""Statements on `cronjob_runtime` (task state, kill switch) and `cronjob_slot` (slot claims)."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, or_, select

from ..status import Ended, Status
from .models import cronjob_runtime as rt
from .models import cronjob_slot
from .sql import bind, insert_ignore, name, ph


def ensure_runtimes(conn: Connection, tasks: list[tuple[str, str, bool]], now: datetime) -> None:
    """Create the runtime rows of `tasks`, `(task, type, enabled)` each, that do not exist
    (never changes an existing one)."""
    if tasks:
        conn.execute(insert_ignore(conn, rt, ["task"]).values(
            [{"task": t, "type": ty, "enabled": e, "updated_at": now} for t, ty, e in tasks]))


def get_runtime(conn: Connection, task: str) -> dict | None:
    """The runtime row of `task` as a dict, or None."""
    row = conn.execute(select(rt).where(rt.c.task == task)).mappings().first()
    return dict(row) if row else None


def list_runtimes(conn: Connection, columns: tuple[str, ...] | None = None) -> dict[str, dict]:
    """All runtime rows, keyed by task name (only `columns` and `task`, when given)."""
    cols = [rt] if columns is None else [rt.c.task, *(rt.c[c] for c in columns)]
    return {r["task"]: dict(r) for r in conn.execute(select(*cols)).mappings()}


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


def claim_slots(conn: Connection, slots: list[tuple[str, str]], now: datetime) -> set[str]:
    """Claim many `(task, slot)` records at once (one tick); returns the tasks this caller
    won. Callers pass them sorted, so concurrent schedulers take the key locks in the same
    order. A conflict means another scheduler started that slot; rows it inserted carry
    their job id before they commit, so a record without one is this transaction's."""
    if not slots:
        return set()
    rows = [{"task": t, "slot": s, "claimed_at": now} for t, s in slots]
    if conn.dialect.name in ("postgresql", "sqlite"):
        stmt = insert_ignore(conn, cronjob_slot, ["task", "slot"]).values(rows) \
            .returning(cronjob_slot.c.task)
        return {r[0] for r in conn.execute(stmt)}
    conn.execute(insert_ignore(conn, cronjob_slot, ["task", "slot"]).values(rows))
    wanted = dict(slots)
    mine = conn.execute(select(cronjob_slot.c.task, cronjob_slot.c.slot).where(
        cronjob_slot.c.task.in_(list(wanted)), cronjob_slot.c.job_id.is_(None)))
    return {t for t, s in mine if wanted.get(t) == s}


def record_runs(conn: Connection, runs: list[tuple[str, str, int, datetime | None]],
                now: datetime) -> None:
    """`record_run` for many scheduled runs, `(task, slot, job_id, next_run_at)` each, in two
    statements with a `CASE task` per column however many runs a tick starts (driver SQL,
    once per tick). The slot records are this transaction's own (no job id yet)."""
    if runs:
        _record_runs_sql(conn, runs, now)


def record_run(conn: Connection, task: str, *, slot: str | None, job_id: int, now: datetime,
               next_run_at: datetime | None) -> None:
    """Note a started run of `task`.

    A scheduled run (`slot` set) moves `last_slot`, `last_run_at`, `next_run_at`,
    `last_job_id` and `last_status` (and ends a buffered slot's wait); a manual run
    (`slot` None) only `last_manual_at` and `last_manual_job_id`, so it never shows as,
    or moves, the schedule.
    """
    if slot is None:
        conn.execute(rt.update().where(rt.c.task == task).values(
            last_manual_job_id=job_id, last_manual_at=now, updated_at=now))
        return
    conn.execute(cronjob_slot.update()
                 .where(cronjob_slot.c.task == task, cronjob_slot.c.slot == slot)
                 .values(job_id=job_id))
    conn.execute(rt.update().where(rt.c.task == task).values(
        last_job_id=job_id, last_status=Status.PENDING, updated_at=now, last_slot=slot,
        last_run_at=now, next_run_at=next_run_at, buffered_slot=None))


def record_skips(conn: Connection, skips: list[tuple[str, str]], reason: str,
                 now: datetime) -> list[tuple[str, str]]:
    """Record slots that started nothing, `(task, slot key)` each, for `reason` (a word of
    `overlap.SKIP_REASONS`): `skipped_count` + 1, `last_skipped_slot`, `last_skipped_at`,
    `last_skip_reason`. A skip is recorded only when its slot key sorts after the task's
    `last_skipped_slot` (keys are fixed-width local or UTC wall times): so each slot
    counts once, whether another scheduler recorded it first or has moved on to a later
    slot meanwhile (a scheduler that lags behind never counts an older slot again). The
    one exception: a cron slot in the second pass of an hour that DST repeats (key with
    an offset, `…0130-0500`) sorts before a first-pass key later in that hour, and is then
    not counted (it still starts nothing). One UPDATE per skip; returns the
    `(task, slot key)` pairs this call recorded."""
    stmt = rt.update().where(
        rt.c.task == bindparam("b_task"),
        or_(rt.c.last_skipped_slot.is_(None), rt.c.last_skipped_slot < bindparam("b_slot"))
    ).values(skipped_count=rt.c.skipped_count + 1, last_skipped_slot=bindparam("b_slot"),
             last_skipped_at=now, last_skip_reason=reason, updated_at=now)
    return [(t, s) for t, s in skips
            if conn.execute(stmt, {"b_task": t, "b_slot": s}).rowcount == 1]


def buffer_slot(conn: Connection, task: str, slot: str, now: datetime) -> bool:
    """Keep `slot` as the one run of `task` (`OVERLAP = "buffer_one"`) waiting behind its
    running run, unless one waits already. True when this call set it; the next start of
    the task clears it."""
    result = conn.execute(rt.update().where(rt.c.task == task, rt.c.buffered_slot.is_(None))
                          .values(buffered_slot=slot, updated_at=now))
    return result.rowcount == 1


def lock_runtime(conn: Connection, task: str) -> dict | None:
    """Read the runtime row of `task` with a row lock held until the transaction ends
    (SQLite: the whole database is locked by BEGIN IMMEDIATE already)."""
    stmt = select(rt).where(rt.c.task == task)
    if conn.dialect.name != "sqlite":
        stmt = stmt.with_for_update()
    row = conn.execute(stmt).mappings().first()
    return dict(row) if row else None


def set_enabled(conn: Connection, task: str, enabled: bool, now: datetime) -> bool:
    """Flip the kill switch of `task`. True if the task has a runtime row."""
    result = conn.execute(rt.update().where(rt.c.task == task)
                          .values(enabled=enabled, updated_at=now))
    return result.rowcount == 1


# The run ended as its handler meant (a cancelled childless row is deleted).
SUCCESS_STATUSES = (Status.COMPLETED, Status.CANCELLED, Ended.DELETED)


def update_task_status(conn: Connection, job_id: int, status: str, now: datetime, *,
                       success: bool | None = None) -> tuple[str, str, int] | None:
    """Copy a finished job's status to the task whose last scheduled job it is; a run that
    ended well (`success`, default: status in SUCCESS_STATUSES) also sets `last_success_at`
    (the overdue check of `health`) and ends the task's `failure_streak`; a `failed` run
    adds one to it.

    Returns:
        `(task, its type, failure_streak)` after a failed run of a task, else None.
    """
    values: dict[str, Any] = {"last_status": status, "updated_at": now}
    ok = status in SUCCESS_STATUSES if success is None else success
    if ok:
        values.update(last_success_at=now, failure_streak=0)
    elif status == Status.FAILED:
        values["failure_streak"] = rt.c.failure_streak + 1
    conn.execute(rt.update().where(rt.c.last_job_id == job_id).values(**values))
    if ok or status != Status.FAILED:
        return None
    row = conn.execute(select(rt.c.task, rt.c.type, rt.c.failure_streak)
                       .where(rt.c.last_job_id == job_id)).first()
    return (row.task, row.type, int(row.failure_streak)) if row else None


def reset_failure_streak(conn: Connection, task: str, now: datetime) -> None:
    """Set the `failure_streak` of `task` back to 0 (`cronjobs resume --task`)."""
    conn.execute(rt.update().where(rt.c.task == task, rt.c.failure_streak != 0)
                 .values(failure_streak=0, updated_at=now))


def _record_runs_sql(conn: Connection, runs: list[tuple[str, str, int, datetime | None]],
                     now: datetime) -> None:
    dialect = name(conn)
    p = functools.partial(ph, dialect)
    params: dict[str, Any] = {"now": bind(dialect, now)}
    job_case, slot_case, next_case, tasks = [], [], [], []
    for n, (task, slot, job_id, next_at) in enumerate(runs):
        params.update({f"t{n}": task, f"s{n}": slot, f"n{n}": bind(dialect, next_at)})
        tasks.append(p(f"t{n}"))
        job_case.append(f"WHEN {p(f't{n}')} THEN {int(job_id)}")
        slot_case.append(f"WHEN {p(f't{n}')} THEN {p(f's{n}')}")
        next_case.append(f"WHEN {p(f't{n}')} THEN {p(f'n{n}')}")
    in_tasks = ", ".join(tasks)
    jobs, slots, nexts = " ".join(job_case), " ".join(slot_case), " ".join(next_case)
    conn.exec_driver_sql(
        f"UPDATE cronjob_slot SET job_id = CASE task {jobs} END WHERE task IN ({in_tasks}) "
        f"AND job_id IS NULL AND slot = CASE task {slots} END", params)
    conn.exec_driver_sql(
        f"UPDATE cronjob_runtime SET last_job_id = CASE task {jobs} END, "
        f"last_slot = CASE task {slots} END, next_run_at = CASE task {nexts} END, "
        f"last_status = 'pending', updated_at = {p('now')}, last_run_at = {p('now')}, "
        f"buffered_slot = NULL "
        f"WHERE task IN ({in_tasks})", params)


def slot_jobs(conn: Connection, slots: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """`{(task, slot): job id}` of the slots of `slots` that have a run (`cronjob_slot`,
    latest committed: the row of a slot another scheduler is claiming is not seen yet)."""
    out: dict[tuple[str, str], int] = {}
    for task, slot in slots:
        job_id = conn.execute(select(cronjob_slot.c.job_id).where(
            cronjob_slot.c.task == task, cronjob_slot.c.slot == slot)).scalar()
        if job_id is not None:
            out[(task, slot)] = int(job_id)
    return out


def record_missed(conn: Connection, task: str, count: int, newest: str, now: datetime) -> bool:
    """Record `count` slots of `task` missed for good (`CATCHUP`), the newest `newest`:
    `skipped_count` + `count`, `last_skipped_slot`, `last_skipped_at`, `last_skip_reason`
    = `missed`. Only when `newest` sorts after the task's `last_skipped_slot` (as
    `record_skips`): schedulers that tick the same instant count the slots once. True
    when this call recorded them."""
    stmt = rt.update().where(
        rt.c.task == task,
        or_(rt.c.last_skipped_slot.is_(None), rt.c.last_skipped_slot < newest),
    ).values(skipped_count=rt.c.skipped_count + int(count), last_skipped_slot=newest,
             last_skipped_at=now, last_skip_reason="missed", updated_at=now)
    return conn.execute(stmt).rowcount == 1


def claimed_slots(conn: Connection, task: str, after: str | None = None,
                  slots: list[str] | None = None) -> dict[str, int | None]:
    """`{slot key: job id}` of the claimed slots of `task` (`cronjob_slot`) whose key sorts
    after `after` (when given), or among `slots` (when given); the job id is None while
    its claimer's transaction has not written it."""
    stmt = select(cronjob_slot.c.slot, cronjob_slot.c.job_id).where(cronjob_slot.c.task == task)
    if after is not None:
        stmt = stmt.where(cronjob_slot.c.slot > after)
    if slots is not None:
        stmt = stmt.where(cronjob_slot.c.slot.in_(slots))
    return {s: (int(j) if j is not None else None) for s, j in conn.execute(stmt)}


def set_slot_job(conn: Connection, task: str, slot: str, job_id: int) -> None:
    """Note `job_id` as the run of the claimed slot `(task, slot)` without touching the
    task's runtime row (a backfilled slot: the schedule's own state stays as it is)."""
    conn.execute(cronjob_slot.update()
                 .where(cronjob_slot.c.task == task, cronjob_slot.c.slot == slot)
                 .values(job_id=job_id))
