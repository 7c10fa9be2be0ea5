"""The sweep: resend due `pending` rows whose broker message seems lost.

The row is the truth; the broker only carries ids. A row that has been due and pending
for longer than `sweep_after_seconds` is sent again (a duplicate message is harmless: the
claim decides). The sweep only reads: it never locks or writes a pending row, because a
row locked by anything but a claim would be skipped by the claims' `SKIP LOCKED` and run
out of priority order. A `Resent` memory keeps one process from resending the same row
more often than every `sweep_after_seconds`.
"""

from __future__ import annotations

import logging
import time

from . import store
from .app import App
from .db import run_in_transaction

log = logging.getLogger("cronjobs.sweep")


class Resent:
    """Row ids this process resent recently (monotonic seconds), to space out resends."""

    def __init__(self) -> None:
        self._at: dict[int, float] = {}

    def fresh(self, job_id: int, within_seconds: float) -> bool:
        """True when `job_id` was resent less than `within_seconds` ago."""
        at = self._at.get(job_id)
        return at is not None and time.monotonic() - at < within_seconds

    def mark(self, job_id: int) -> None:
        """Note that `job_id` was resent now; forget entries older than an hour."""
        now = time.monotonic()
        self._at[job_id] = now
        if len(self._at) > 100_000:
            self._at = {k: v for k, v in self._at.items() if now - v < 3600}


def sweep(app: App, queues: list[str] | None = None, *, idle_seconds: float | None = None,
          limit: int = 1000, resent: Resent | None = None) -> int:
    """Resend pending rows due for more than `idle_seconds`; returns how many were sent.

    Args:
        queues: only these queues (default all).
        idle_seconds: default `settings.sweep_after_seconds`.
        limit: at most this many rows per call.
        resent: this process's memory of recent resends (rows in it are skipped).
    """
    idle = app.settings.sweep_after_seconds if idle_seconds is None else idle_seconds
    now = app.clock.now()
    rows = run_in_transaction(app.engine, lambda c: store.due_pending(c, now, idle, limit, queues))
    if resent is not None:
        rows = [r for r in rows if not resent.fresh(r["id"], max(idle, 1.0))]
    for row in rows:
        app.send(row["id"], row["queue"])
        if resent is not None:
            resent.mark(row["id"])
    if rows:
        log.info("sweep: resent %d pending row(s) whose message may be lost", len(rows))
    return len(rows)
