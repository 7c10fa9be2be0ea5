"""Worker heartbeats in `cronjob_worker`, and the view of live workers per queue."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from . import store
from .app import App
from .db import run_in_transaction

HEARTBEAT_SECONDS = 10
LIVE_SECONDS = 3 * HEARTBEAT_SECONDS


def beat(app: App, worker_id: str, queues: list[str], started_at: datetime, status: str,
         jobs_done: int, current: list[int], memory_mb: float | None = None) -> None:
    """Write this worker's heartbeat (times naive UTC; `memory_mb`: resident MB of the
    worker and its job processes)."""
    values = {"id": worker_id, "host": socket.gethostname(), "pid": os.getpid(),
              "queues": ",".join(queues)[:1000], "status": status, "started_at": started_at,
              "last_seen_at": app.clock.now(), "jobs_done": jobs_done,
              "current_jobs": ",".join(map(str, current))[:1000], "memory_mb": memory_mb}
    run_in_transaction(app.engine, lambda c: store.beat(c, values))


def forget(app: App, worker_id: str) -> None:
    """Remove the heartbeat of a worker that stops cleanly."""
    run_in_transaction(app.engine, lambda c: store.forget(c, worker_id))


@dataclass(frozen=True)
class WorkersView:
    """Live and dead workers, and the queues nobody consumes.

    Attributes:
        live: heartbeat rows seen within the last 30 s.
        dead: older rows (a worker that was killed); `cleanup` removes them after a day.
        unserved: configured queues with no live worker.
    """

    live: list[dict]
    dead: list[dict]
    unserved: list[str]


def view(app: App) -> WorkersView:
    """Read the heartbeats and compare them with the queues of the registered handlers."""
    cutoff = app.clock.now() - timedelta(seconds=LIVE_SECONDS)
    rows = run_in_transaction(app.engine, store.list_workers)
    live = [r for r in rows if r["last_seen_at"] >= cutoff]
    served = {q for r in live for q in r["queues"].split(",") if q}
    return WorkersView(live, [r for r in rows if r["last_seen_at"] < cutoff],
                       [q for q in app.queues() if q not in served])
