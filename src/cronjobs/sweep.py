"""The sweep: resend due `pending` rows whose broker message seems lost.

The row is the truth; the broker only carries ids. A row that has been due and pending
for longer than `sweep_after_seconds` is sent again (a duplicate message is harmless: the
claim decides). Concurrent sweepers skip each other's rows (SKIP LOCKED) and each resent
row is stamped, so it is not resent again before another `sweep_after_seconds`.
"""

from __future__ import annotations

import logging

from . import store
from .app import App
from .db import run_in_transaction

log = logging.getLogger("cronjobs.sweep")


def sweep(app: App, queues: list[str] | None = None, *, idle_seconds: float | None = None,
          limit: int = 1000) -> int:
    """Resend pending rows due for more than `idle_seconds`; returns how many were sent.

    Args:
        queues: only these queues (default all).
        idle_seconds: default `settings.sweep_after_seconds`.
        limit: at most this many rows per call.
    """
    idle = app.settings.sweep_after_seconds if idle_seconds is None else idle_seconds
    now = app.clock.now()

    def pick(conn) -> list[dict]:  # noqa: ANN001
        rows = store.due_pending(conn, now, idle, limit, queues)
        store.touch(conn, [r["id"] for r in rows], now)
        return rows

    rows = run_in_transaction(app.engine, pick)
    for row in rows:
        app.send(row["id"], row["queue"])
    if rows:
        log.info("sweep: resent %d pending row(s) whose message may be lost", len(rows))
    return len(rows)
