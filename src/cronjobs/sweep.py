"""The sweep: resend due `pending` rows whose broker message seems lost.

The row is the truth; the broker only carries ids. A row that has been due and pending
for longer than `sweep_after_seconds` is sent again (a duplicate message is harmless: the
claim decides). Concurrent sweepers skip each other's rows (SKIP LOCKED) and each resent
row is stamped, so it is not resent again before another `sweep_after_seconds`.
"""

from __future__ import annotations

import logging
import threading

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


class Sweeper(threading.Thread):
    """Background thread: `sweep()` every `interval` seconds and renew running leases.

    Args:
        app: the App.
        queues: the queues this worker consumes.
        interval: seconds between sweeps.
        executor: when given, its leases are renewed every `settings.lease_renew_seconds`.
    """

    def __init__(self, app: App, queues: list[str], interval: float, executor=None) -> None:  # noqa: ANN001
        super().__init__(name="cronjobs-sweeper", daemon=True)
        self.app, self.queues, self.interval, self.executor = app, queues, interval, executor
        self.stop_event = threading.Event()

    def run(self) -> None:
        """Loop until `stop()`; errors are logged and the loop goes on."""
        renew_every = self.app.settings.lease_renew_seconds
        step = min(self.interval, renew_every)
        since_sweep = since_renew = 0.0
        while not self.stop_event.wait(step):
            since_sweep += step
            since_renew += step
            try:
                if self.executor is not None and since_renew >= renew_every:
                    since_renew = 0.0
                    self.executor.renew_leases()
                if since_sweep >= self.interval:
                    since_sweep = 0.0
                    sweep(self.app, self.queues)
            except Exception as exc:  # the database may be down; try again next round
                log.warning("sweep failed (%s: %s); retrying in %.0f s", type(exc).__name__,
                            exc, step)

    def stop(self) -> None:
        """Ask the loop to end."""
        self.stop_event.set()
