"""The sweep: find queues whose due `pending` rows have waited too long.

The row is the truth; the broker only carries doorbells. A row that has been due and
pending for longer than `sweep_after_seconds` had its message lost (a Redis flush, a send
that failed) or arrived while every slot was busy; the worker's sweep then rings its own
pool for that queue, and the pool's loop claims the rows. The sweep only reads: it never
locks or writes a pending row, because a row locked by anything but a claim would be
skipped by the claims' `SKIP LOCKED` and run out of priority order.
"""

from __future__ import annotations

import logging

from .. import store
from ..app import App
from ..family import depends, unrun
from ..store.db import run_in_transaction

log = logging.getLogger("cronjobs.worker.sweep")


def sweep(app: App, queues: list[str] | None = None, *, idle_seconds: float | None = None,
          limit: int = 1000) -> list[str]:
    """The queues (of `queues`, default all) that have rows due and pending for longer
    than `idle_seconds` (default `settings.sweep_after_seconds`).

    Args:
        limit: rows looked at per call.

    Returns:
        Queue names, in order of their best waiting row.
    """
    idle = app.settings.sweep_after_seconds if idle_seconds is None else idle_seconds
    now = app.clock.now()
    rows = run_in_transaction(app.engine, lambda c: store.due_pending(c, now, idle, limit, queues))
    found = list(dict.fromkeys(r["queue"] for r in rows))
    if found:
        log.debug("sweep: due rows waiting in %s", ", ".join(found))
    return found


def release_waiting(app: App, limit: int = 100) -> list[tuple[int, str]]:
    """Release (or cancel) the `waiting` rows whose dependencies have all finished but
    were not decided by the finishing transaction (`depends.release_ready`, at most
    `limit` rows looked at); returns `(id, queue)` of the rows made `pending`, to ring."""
    now = app.clock.now()

    def work(conn) -> list[tuple[int, str]]:
        settled = depends.release_ready(conn, now, limit)
        unrun.insert_deliveries(conn, app, settled.ended, now)  # rows it cancelled
        return settled.released

    return run_in_transaction(app.engine, work)
