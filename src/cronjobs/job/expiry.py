"""Ending the rows that were not started by their deadline (`expires_at`).

A row dispatched with `expires_at`/`expires_in`, or a task's slot row under its
STARTING_DEADLINE, is never claimed once its deadline has passed (the due condition,
`store.sql`). `expire` ends such rows `expired` (`store.expiry.expire_pending`: no
attempt used, `handle()` never called) and, in the same transaction, settles what their
end starts (`family.settle.settle_rows`: dependents are treated as of a failed row,
families count them as not completed); the rows it releases are rung after the commit.
The worker's sweep calls it at every turn (`worker.loop.Worker.sweep`).
"""

from __future__ import annotations

import logging

from .. import store
from ..app import App
from ..family.settle import settle_rows
from ..store.db import run_in_transaction
from .dispatching import send

log = logging.getLogger("cronjobs.queue")


def expire(app: App, queues: list[str] | None = None, *, limit: int = 500) -> list[int]:
    """End the `pending` rows (of `queues`, default all) whose `expires_at` is at or before
    the clock's now (`app.clock`, naive UTC: the instant the claim judges with).

    Args:
        app: the App whose database, clock and broker are used.
        queues: only rows of these queues; None: every queue.
        limit: rows ended per call, at most (call again while it returns `limit` ids).

    Returns:
        The ids of the rows ended `expired`, oldest deadline first.
    """
    now = app.clock.now()

    def end(conn) -> tuple[list[dict], list[tuple[int, str]]]:
        changed = store.expiry.expire_pending(conn, now, limit, queues)
        return changed, settle_rows(conn, app, changed, now) if changed else []

    changed, released = run_in_transaction(app.engine, end)
    for row in changed:
        log.info("job %s expired: not started by its deadline", row["id"],
                 extra={"trace_id": row["id"]})
    for job_id, queue in released:
        send(app, job_id, queue)
    return [row["id"] for row in changed]
