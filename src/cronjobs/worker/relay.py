"""A worker's doorbells for other workers: passed on while it is busy, put back as it stops.

A broker message is a doorbell for a queue, not a job (`pool`). A worker whose pool is
rung already for a queue (its slots busy, or a burst's doorbells arriving before its
claim) passes one doorbell on to the broker, so that a worker with idle slots claims too
(`Relay.pass_on`). A worker that stops or recycles claims nothing more: a doorbell that
reaches it then is held, and once its consumer has stopped (so that it cannot take the
doorbell back itself), one per queue is put back on the broker for another worker, when
that queue still has due rows (`Relay.put_back`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..app import App
from ..bounded import within
from ..job import dispatching
from .sweep import sweep

log = logging.getLogger("cronjobs.worker.loop")

PASS_ON_SECONDS = 0.25  # a worker rung already passes a queue's doorbell on at most this often
PUT_BACK_SECONDS = 5.0  # how long a stopping worker waits to learn which queues have due rows


class Relay:
    """The doorbells one worker process sends on to others.

    Args:
        app: the worker's App (its broker sends; its engine tells whether a queue has
            due rows).
        wanted: `wanted(queue)` is True while a doorbell passed on for `queue` is still of
            use: this worker accepts rows and its pool is rung for `queue` (not drained).
    """

    def __init__(self, app: App, wanted: Callable[[str], bool]) -> None:
        self.app = app
        self._wanted = wanted
        self._lock = threading.Lock()
        self._passed: dict[str, float] = {}  # queue -> when a doorbell was last passed on
        self._later: set[str] = set()  # queues whose doorbell is passed on when due
        self._held: dict[str, int] | None = {}  # queue -> a row id; None once put back

    def pass_on(self, queue: str, job_id: int) -> None:
        """This worker's pool is rung for `queue` already: ring it once more on the broker
        (message for row `job_id`), for a worker with idle slots (this one claims as its
        slots free). At most once per `PASS_ON_SECONDS` per queue, so doorbells do not
        circle fast between workers that are all busy; one that comes sooner is passed on
        when that time is up, if it is still `wanted` (not dropped: this worker's own
        consumer, fetching again right after a message, often takes back the doorbell it
        passed on, and dropping that one left an idle worker without any while this one
        had a backlog). One doorbell is enough: a rung worker claims until the queue is
        drained."""
        now = time.monotonic()
        with self._lock:
            if queue in self._later:  # one is due to be passed on: it stands for this
                return
            wait = self._passed.get(queue, float("-inf")) + PASS_ON_SECONDS - now
            if wait > 0:
                self._later.add(queue)
                timer = threading.Timer(wait, self._pass_on_later, (queue, job_id))
                timer.daemon = True
                timer.start()
                return
            self._passed[queue] = now
        dispatching.send(self.app, job_id, queue)

    def _pass_on_later(self, queue: str, job_id: int) -> None:
        with self._lock:
            self._later.discard(queue)
            self._passed[queue] = time.monotonic()
        if self._wanted(queue):
            dispatching.send(self.app, job_id, queue)
        else:  # drained, or this worker stops: put back then if its queue has due rows
            self.hold(queue, job_id)

    def hold(self, queue: str, job_id: int) -> None:
        """A doorbell (for row `job_id`) that reached this worker while it stops or
        recycles: kept for `put_back`. Sent back at once had this worker's own consumer,
        still fetching until it stops, take it again and again; and a single worker left
        the last one in the broker. After `put_back`, sent at once."""
        with self._lock:
            if self._held is not None:
                self._held[queue] = job_id
                return
        dispatching.send(self.app, job_id, queue)

    def put_back(self, timeout_seconds: float = PUT_BACK_SECONDS) -> list[str]:
        """Once the consumer has stopped: send one doorbell for each queue held that
        still has due `pending` rows, for another worker (every held queue when the
        database cannot say within `timeout_seconds`). Returns the queues rung."""
        with self._lock:
            held, self._held = self._held or {}, None
        if not held:
            return []
        try:
            queues = within(timeout_seconds, lambda: sweep(self.app, list(held), idle_seconds=0))
        except Exception as exc:  # the database is down: ring them all, claims sort it out
            log.warning("could not read which queues still have due rows (%s); putting "
                        "back a doorbell for each of %s", exc, ", ".join(held))
            queues = list(held)
        for queue in queues:
            dispatching.send(self.app, held[queue], queue)
        return queues
