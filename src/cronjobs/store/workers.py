"""Statements on `cronjob_worker`: heartbeats of worker processes.

Heartbeat times (`started_at`, `last_seen_at`) come from the database's clock, like
leases, so a worker host whose clock is off is neither shown dead nor kept alive.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from .models import cronjob_queue as q
from .models import cronjob_worker as w
from .sql import db_now


def beat(conn: Connection, values: dict) -> None:
    """Write the heartbeat row `values["id"]` (update, or insert the first time).

    Args:
        values: `id`, `host`, `pid`, `queues`, `status`, `jobs_done`, `current_jobs`.
    """
    changes = {k: v for k, v in values.items() if k not in ("id", "host", "pid")}
    if conn.execute(w.update().where(w.c.id == values["id"])
                    .values(last_seen_at=db_now(conn), **changes)).rowcount == 0:
        conn.execute(w.insert().values(started_at=db_now(conn), last_seen_at=db_now(conn),
                                       **values))


def forget(conn: Connection, worker_id: str) -> None:
    """Remove the heartbeat row of a worker that stopped cleanly."""
    conn.execute(w.delete().where(w.c.id == worker_id))


def list_workers(conn: Connection, live_seconds: float) -> list[dict]:
    """Every heartbeat row, newest first, each with `live`: seen within `live_seconds`
    by the database's clock, and `age_seconds` since it was last seen."""
    rows = [dict(r) for r in conn.execute(select(w, db_now(conn).label("db_now"))
                                          .order_by(w.c.last_seen_at.desc())).mappings()]
    for row in rows:
        now = row.pop("db_now")
        row["age_seconds"] = max(0.0, (now - row["last_seen_at"]).total_seconds())
        row["live"] = row["age_seconds"] <= live_seconds
    return rows


def running_by_worker(conn: Connection, worker_ids: list[str]) -> dict[str, list[int]]:
    """`{worker id: ids of the rows running under it}` for `worker_ids` (rows a dead
    worker still holds until recover-stale takes them back), ids ascending."""
    if not worker_ids:
        return {}
    out: dict[str, list[int]] = {}
    for job_id, worker_id in conn.execute(
            select(q.c.id, q.c.worker_id).where(q.c.status == "running",
                                                q.c.worker_id.in_(worker_ids))
            .order_by(q.c.id)):
        out.setdefault(worker_id, []).append(job_id)
    return out


def prune_workers(conn: Connection, older_than_seconds: float) -> int:
    """Delete heartbeat rows last seen longer ago than `older_than_seconds` (killed
    workers; a clean stop removes its own); returns how many."""
    return conn.execute(w.delete().where(w.c.last_seen_at < db_now(conn, -older_than_seconds))
                        ).rowcount
