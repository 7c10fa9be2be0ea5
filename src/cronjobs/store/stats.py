"""Read queries of the Overview page: rows finished per minute or hour, queue depth and the
oldest due row per queue, busy slots and the workers' heartbeats.

Each statement reads one index range, never the whole table
(`tests/test_dashboard_explain.py` runs `EXPLAIN` on them with the pages):

- finished rows per time bucket: the `(status, finished_at, type)` index over
  `[since, until)` for `completed` and `failed`, grouped by bucket in SQL (the attempts
  column is read from the row for the retry count);
- queues with live rows: a loose scan of the claim index `(queue, status, priority, id)`;
- per queue: capped counts on the claim index, the oldest due row among the first
  `DUE_CAP` due rows in claim order (as `queues.due_by_queue`).

The cost of a series grows with the rows finished in its window (at 1 row a second, 3,600
an hour); the dashboard keeps finished hours in memory and reads each one once
(`web.overview`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, DateTime, Integer, bindparam, case, cast, func, literal_column
from sqlalchemy import select as sa_select

from ..status import Status
from . import queues, views
from .models import cronjob_queue as q
from .sql import name as dialect_name
from .workers import list_workers

SERIES_STATUSES = (Status.COMPLETED, Status.FAILED, Status.EXPIRED)
QUEUES_SHOWN = 20  # queues listed one by one on the Overview page
DUE_CAP = queues.DUE_CAP


def _bucket(conn: Connection, column, since: datetime, step_seconds: int):
    """SQL: the number of whole `step_seconds` from `since` to `column` (0 for the first
    bucket). Each backend measures the distance between two naive UTC times its own way;
    none depends on the session's time zone."""
    start = bindparam(None, since, type_=DateTime())
    dialect = dialect_name(conn)
    if dialect == "mysql":
        seconds = func.timestampdiff(literal_column("SECOND"), start, column)
    elif dialect == "postgresql":
        seconds = cast(func.floor(func.extract("epoch", column - start)), Integer)
    else:  # SQLite: both are 'YYYY-MM-DD HH:MM:SS[.ffffff]' text; %s is whole seconds
        seconds = (cast(func.strftime("%s", column), Integer)
                   - cast(func.strftime("%s", start), Integer))
    return cast(seconds, Integer) // step_seconds


def finished_buckets(conn: Connection, since: datetime, step_seconds: int,
                     buckets: int) -> list[dict]:
    """Rows that ended in each of `buckets` periods of `step_seconds` from `since`.

    Args:
        since: start of the first bucket, naive UTC.
        step_seconds: bucket length in seconds (60: per minute, 3600: per hour).
        buckets: how many buckets (the window is `buckets * step_seconds` long).

    Returns:
        One dict per bucket, oldest first: `{"at": bucket start (naive UTC), "completed": n,
        "failed": n, "expired": n, "retried": n}` (`expired`: rows never started by their
        deadline); `retried` counts the attempts beyond the first of the rows that ended
        in the bucket (what `/metrics` calls `cronjobs_job_retries`).
    """
    until = since + timedelta(seconds=step_seconds * buckets)
    inner = (sa_select(_bucket(conn, q.c.finished_at, since, step_seconds).label("b"),
                       q.c.status, q.c.attempts)
             .where(q.c.status.in_(SERIES_STATUSES), q.c.finished_at >= since,
                    q.c.finished_at < until))
    for dialect in ("mysql", "mariadb"):  # when the window holds most rows, MariaDB would
        inner = inner.with_hint(  # read the whole table instead (seen with 30,000 rows)
            q, "FORCE INDEX (ix_cronjob_queue_status_finished)", dialect_name=dialect)
    inner = inner.subquery()
    retried = func.sum(case((inner.c.attempts > 1, inner.c.attempts - 1), else_=0))
    stmt = (sa_select(inner.c.b, inner.c.status, func.count().label("n"), retried.label("r"))
            .group_by(inner.c.b, inner.c.status))
    out = [{"at": since + timedelta(seconds=step_seconds * i), "completed": 0, "failed": 0,
            "expired": 0, "retried": 0} for i in range(buckets)]
    for row in conn.execute(stmt):
        index = int(row.b)
        if 0 <= index < buckets:
            out[index][row.status] += int(row.n)
            out[index]["retried"] += int(row.r or 0)
    return out


def live_queues(conn: Connection) -> list[str]:
    """Queues that hold `pending` or `running` rows, sorted: a loose scan of the claim
    index `(queue, status, ...)`, one probe per (queue, status) whatever the number of rows.
    The grouping names both columns and the rows are sorted here: MariaDB walked the whole
    index for `GROUP BY queue` alone, and read every live row with an ORDER BY (1.1 s at
    30,000 live rows of 1,000,000)."""
    stmt = (sa_select(q.c.queue, q.c.status).where(q.c.status.in_((Status.PENDING, Status.RUNNING)))
            .group_by(q.c.queue, q.c.status))
    for dialect in ("mysql", "mariadb"):
        stmt = stmt.with_hint(q, "FORCE INDEX (ix_cronjob_queue_claim)", dialect_name=dialect)
    return sorted({r.queue for r in conn.execute(stmt)})


def queue_stats(conn: Connection, now: datetime, limit: int = QUEUES_SHOWN,
                cap: int = views.COUNT_CAP) -> dict:
    """Depth, running rows and the oldest due row of each queue with live rows.

    Args:
        now: naive UTC (a row is due when its `scheduled_at` is empty or not after it).
        limit: queues reported one by one (the first by name); `more` counts the others.
        cap: counts stop at this many rows.

    Returns:
        `{"queues": [{"queue", "pending": (n, capped), "running": (n, capped), "due":
        (n, capped), "oldest_due_at": naive UTC or None}], "more": n}`; `due` is capped at
        `DUE_CAP` and `oldest_due_at` is the oldest among those rows.
    """
    names = live_queues(conn)
    out = []
    for queue in names[:limit]:
        due = queues.due_in_queues(conn, now, [queue])
        out.append({
            "queue": queue,
            "pending": views.capped_count(conn, q.c.queue == queue, q.c.status == Status.PENDING,
                                          cap=cap),
            "running": views.capped_count(conn, q.c.queue == queue, q.c.status == Status.RUNNING,
                                          cap=cap),
            "due": (due["due"], due["capped"]), "oldest_due_at": due["oldest_due_at"]})
    return {"queues": out, "more": max(0, len(names) - limit)}


def busy(conn: Connection, live_seconds: float, cap: int = views.COUNT_CAP) -> dict:
    """Busy slots and workers.

    Args:
        live_seconds: a worker seen (heartbeat, database clock) within this is live.

    Returns:
        `{"running": (n, capped)` rows running now (the busy slots, from the rows),
        `"live": [heartbeat rows]`, `"dead": n}`; each live row has `busy`: the jobs its
        last heartbeat named (at most `live_seconds` old).
    """
    workers = heartbeats(conn, live_seconds)
    live = [w for w in workers if w["live"]]
    for worker in live:
        worker["busy"] = len([j for j in (worker.get("current_jobs") or "").split(",") if j])
    return {"running": views.capped_count(conn, q.c.status == Status.RUNNING, cap=cap),
            "live": live, "dead": len(workers) - len(live)}


def heartbeats(conn: Connection, live_seconds: float) -> list[dict]:
    """Every worker's heartbeat row, newest first, with `live` and `age_seconds` (by the
    database's clock; see `store.workers.list_workers`)."""
    return list_workers(conn, live_seconds)
