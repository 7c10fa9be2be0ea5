"""Statements on `cronjob_worker`: heartbeats of worker processes."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select

from ..models import cronjob_worker as w


def beat(conn: Connection, values: dict) -> None:
    """Write the heartbeat row `values["id"]` (update, or insert the first time)."""
    changes = {k: v for k, v in values.items() if k not in ("id", "started_at", "host", "pid")}
    if conn.execute(w.update().where(w.c.id == values["id"]).values(**changes)).rowcount == 0:
        conn.execute(w.insert().values(**values))


def forget(conn: Connection, worker_id: str) -> None:
    """Remove the heartbeat row of a worker that stopped cleanly."""
    conn.execute(w.delete().where(w.c.id == worker_id))


def list_workers(conn: Connection) -> list[dict]:
    """Every heartbeat row, newest first."""
    return [dict(r) for r in conn.execute(select(w).order_by(w.c.last_seen_at.desc())).mappings()]


def prune_workers(conn: Connection, before: datetime) -> int:
    """Delete heartbeat rows last seen before `before` (dead workers); returns how many."""
    return conn.execute(w.delete().where(w.c.last_seen_at < before)).rowcount
