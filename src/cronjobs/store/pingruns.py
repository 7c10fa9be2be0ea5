"""Runs of jobs that live elsewhere (a system crontab, another codebase), recorded from
their pings in (`POST /api/ping/<task>`, `cronjobs ping TASK`) as rows of their task.

A ping row sits in the reserved queue `PING_QUEUE`, which no worker takes, and is never
`pending`: `start` writes it `running` with no lease (`locked_until` NULL, so
`recover-stale` never puts it back), and success or fail finish it. So no worker ever
claims one. The task's runtime row follows it as it follows a scheduled run
(`last_job_id`, `last_run_at`, `last_status`, `last_success_at`: the overdue check).
"""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import Connection, insert, select

from .. import limits
from ..status import Status
from .models import cronjob_queue as q
from .models import cronjob_runtime as rt
from .runtime import ensure_runtimes, update_task_status

PING_QUEUE = "cronjobs-pings"  # no handler has it: workers do not consume it by default
PING_KINDS = ("start", "success", "fail")
PING_WORKER = "ping"  # the worker id written to a ping row


def open_ping_run(conn: Connection, job_type: str) -> int | None:
    """The id of the newest `running` ping row of `job_type` (a start not ended), or None."""
    return conn.execute(select(q.c.id).where(
        q.c.type == job_type, q.c.queue == PING_QUEUE, q.c.status == Status.RUNNING)
        .order_by(q.c.id.desc()).limit(1)).scalar()


def record_ping(conn: Connection, task: str, job_type: str, kind: str, text: str | None,
                now: datetime) -> tuple[int, str]:
    """Record ping `kind` (`start`, `success`, `fail`) of `task` (rows of `job_type`) at
    `now` (naive UTC), in the caller's transaction.

    `start` makes a `running` row (an open one left by an earlier start ends `failed`,
    "started again before it ended"); `success` / `fail` finish the open row, or make a
    finished one when none is open. `text` (the run's output or error, cut to the
    error's size limit with a marker) goes to the row's process log, and to its error on
    `fail`.

    Returns:
        `(row id, status written)`.

    Raises:
        ValueError: `kind` is none of `PING_KINDS`.
    """
    if kind not in PING_KINDS:
        raise ValueError(f"ping kind must be one of {', '.join(PING_KINDS)}, got {kind!r}")
    ensure_runtimes(conn, [(task, job_type, True)], now)
    line = limits.log_line(f"[{now:%Y-%m-%d %H:%M:%S}] ping in: {kind}") + "\n"
    body = limits.cut(text, limits.ERROR_MAX_BYTES) if text else None
    logs = line + (body + "\n" if body else "")
    open_id = open_ping_run(conn, job_type)
    if kind == "start":
        if open_id is not None:
            _finish(conn, open_id, Status.FAILED, "started again before it ended", "", now)
        job_id = _insert(conn, job_type, Status.RUNNING, logs, None, now)
        _follow(conn, task, job_id, Status.RUNNING, now)
        return job_id, Status.RUNNING
    status = Status.COMPLETED if kind == "success" else Status.FAILED
    error = (body or "failed (ping in)") if status == Status.FAILED else None
    if open_id is None:
        job_id = _insert(conn, job_type, status, logs, error, now)
        _follow(conn, task, job_id, status, now)
    else:
        job_id = open_id
        _finish(conn, job_id, status, error, logs, now)
    update_task_status(conn, job_id, status, now)
    return job_id, status


def _insert(conn: Connection, job_type: str, status: str, logs: str, error: str | None,
            now: datetime) -> int:
    done = status != Status.RUNNING
    result = conn.execute(insert(q).values(
        type=job_type, queue=PING_QUEUE, status=status, payload=json.dumps({"ping": True}),
        process_logs=logs, error=error, attempts=1, max_attempts=1, title="ping in",
        scheduled_at=now, started_at=now, finished_at=now if done else None,
        worker_id=PING_WORKER, created_at=now, updated_at=now))
    return int(result.inserted_primary_key[0])


def _finish(conn: Connection, job_id: int, status: str, error: str | None, logs: str,
            now: datetime) -> None:
    row = conn.execute(select(q.c.process_logs).where(q.c.id == job_id)).scalar() or ""
    conn.execute(q.update().where(q.c.id == job_id, q.c.status == Status.RUNNING).values(
        status=status, error=error, finished_at=now, updated_at=now,
        process_logs=limits.bounded_log(row, logs)))


def _follow(conn: Connection, task: str, job_id: int, status: str, now: datetime) -> None:
    """Make row `job_id` the task's last run (its status and success follow it)."""
    conn.execute(rt.update().where(rt.c.task == task).values(
        last_job_id=job_id, last_run_at=now, last_status=status, updated_at=now))


def end_overdue_pings(conn: Connection, max_seconds: dict[str, float], now: datetime
                      ) -> list[int]:
    """End `failed` each open (`running`) ping row of a type in `max_seconds` that started
    more than its seconds before `now` (naive UTC): a `start` of a task that runs here
    whose end never came, so it cannot hold the task's schedule (OVERLAP) forever.
    Rows of other types (external tasks: no MAX_RUNTIME here) are left open.

    Args:
        max_seconds: type -> seconds an open ping row of it may stay open.

    Returns:
        The ids of the rows ended.
    """
    ended = []
    for job_id, job_type, started in conn.execute(select(q.c.id, q.c.type, q.c.started_at).where(
            q.c.queue == PING_QUEUE, q.c.status == Status.RUNNING)).all():
        limit = max_seconds.get(job_type)
        if limit is None or started is None or (now - started).total_seconds() <= limit:
            continue
        _finish(conn, job_id, Status.FAILED, f"ping start not ended within {limit:g} s "
                f"(the task's MAX_RUNTIME and recover_stale_minutes)",
                limits.log_line(f"[{now:%Y-%m-%d %H:%M:%S}] ended by recover-stale") + "\n",
                now)
        update_task_status(conn, job_id, Status.FAILED, now)
        ended.append(job_id)
    return ended
