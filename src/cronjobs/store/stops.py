"""Statements on `cronjob_stop`: an operator's requests to stop a running run, and the
running rows the Workers page lists with them.

A request names one run, `(job_id, attempt)`: it is written only while the row runs that
attempt, and a later attempt of the row (a retry) is never stopped by it. The worker that
holds the run reads the requests of its running runs (`requested`) every second.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Connection, and_, or_, select, tuple_

from ..status import Status
from .models import cronjob_queue as q
from .models import cronjob_stop as s
from .sql import name as dialect_name

RUNNING_SHOWN = 200  # running rows the Workers page lists (oldest first)


def request_stop(conn: Connection, job_id: int, now: datetime, who: str) -> dict | None:
    """Ask the worker running row `job_id` to stop it: a request for its current attempt.

    The row is read with a lock, so it cannot finish between the check and the insert,
    and two requests for one run take turns: the second finds the first and writes nothing.

    Args:
        now: naive UTC, `requested_at`.
        who: who asked (`dashboard`, `cli`), at most 64 characters.

    Returns:
        `{id, attempts, worker_id, status}` of the row when it is `running` (the request is
        written), else `{..., status}` as it is (nothing written), or None when there is
        no row `job_id`.
    """
    row = conn.execute(select(q.c.id, q.c.attempts, q.c.worker_id, q.c.status)
                       .where(q.c.id == job_id).with_for_update()).mappings().first()
    if row is None or row["status"] != Status.RUNNING:
        return None if row is None else dict(row)
    asked = select(s.c.job_id).where(s.c.job_id == job_id, s.c.attempt == row["attempts"])
    if conn.execute(asked).first() is None:
        conn.execute(s.insert().values(job_id=job_id, attempt=row["attempts"],
                                       requested_by=who[:64], requested_at=now))
    return dict(row)


def requested(conn: Connection, runs: Iterable[tuple[int, int]]) -> dict[int, str]:
    """The stop requests among `runs` (`(job_id, attempt)` pairs of running runs).

    Returns:
        `{job_id: requested_by}` of the runs asked to stop.
    """
    runs = [(int(j), int(a)) for j, a in runs]
    if not runs:
        return {}
    if dialect_name(conn) == "sqlite":  # no row-value IN on every SQLite build
        held = or_(*(and_(s.c.job_id == j, s.c.attempt == a) for j, a in runs))
    else:
        held = tuple_(s.c.job_id, s.c.attempt).in_(runs)
    stmt = select(s.c.job_id, s.c.requested_by).where(held)
    return {int(r.job_id): r.requested_by for r in conn.execute(stmt)}


def running_rows(conn: Connection, limit: int = RUNNING_SHOWN) -> list[dict]:
    """The running rows, oldest first (the `(status, id)` index; at most `limit`), each
    with `stop_requested`: the time of a stop request for its current attempt, or None.

    Returns:
        `[{id, type, title, queue, attempts, max_attempts, worker_id, started_at,
        locked_until, stop_requested}]`.
    """
    stmt = (select(q.c.id, q.c.type, q.c.title, q.c.queue, q.c.attempts, q.c.max_attempts,
                   q.c.worker_id, q.c.started_at, q.c.locked_until,
                   s.c.requested_at.label("stop_requested"))
            .outerjoin(s, and_(s.c.job_id == q.c.id, s.c.attempt == q.c.attempts))
            .where(q.c.status == Status.RUNNING).order_by(q.c.id).limit(limit))
    return [dict(r) for r in conn.execute(stmt).mappings()]
