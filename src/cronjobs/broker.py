"""The Dramatiq side: build the broker from a URL, declare one actor per queue, send row ids.

Messages carry only a row id, and a message is a doorbell: in a worker the actor calls the
worker's `on_message(queue, job_id)`, which only rings the worker's pool ("queue `q` may
have due rows"); the pool's loop then claims the best due rows of the queue (priority,
then age) for its idle slots. So the broker's FIFO order never overrides a row's priority,
and a duplicated or stray message is harmless. A process that only sends (the dashboard,
the scheduler, your application) never consumes and needs no callback.

`ring` is how a new row's message leaves (`dispatching.send`): for a network broker it
hands the message to a background thread of the process (`Doorbells`) and returns at
once, so a dispatch does not wait for a Redis round trip (most of a keyed dispatch's time
in the profile). The thread sends one message per `ROWS_PER_RING` rings of a queue
that piled up meanwhile (at most `DOORBELLS_PER_QUEUE`; a message is a doorbell: the
worker claims rows, not message ids), keeps a queue that is rung fast to one batch per
`RING_GAP_SECONDS` (each message costs CPU in Dramatiq and redis-py), sends
each delayed message for its own time, and is flushed by `close()` and at the exit of the
process. A process killed before its thread sent leaves
the rows to the worker's sweep, like any lost message.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable

import dramatiq
from dramatiq.brokers.stub import StubBroker

from .config import AMQP_SCHEMES, MEMORY_BROKER, REDIS_SCHEMES
from .errors import ConfigError

log = logging.getLogger("cronjobs.broker")

ACTOR_PREFIX = "cronjobs_run_"
DOORBELLS_PER_QUEUE = 16  # messages per queue in one batch of the doorbell thread, at most
ROWS_PER_RING = 8  # rows rung per message sent (a worker's default slots claim them)
RING_GAP_SECONDS = 0.002  # a queue's messages are at least this far apart, while rung fast
RING_GAP_MAX_SECONDS = 0.02  # ... up to this far while rung faster than one per RING_GAP
FLUSH_SECONDS = 5.0  # how long close() and the exit of a process wait for the thread

_RINGERS: list[Doorbells] = []  # the doorbell threads started in this process (and forks'):
# sent out at the exit of the process (`flush_rung`, registered once below) and, in a job
# process, which ends by `os._exit`, before it does (`jobprocess`)


def build_dramatiq_broker(url: str, namespace: str = "cronjobs") -> dramatiq.Broker:
    """Create a Dramatiq broker for `url`.

    Args:
        url: `memory://` (in-process StubBroker), `redis://...`, `amqp://...`.
        namespace: Redis key prefix (lets several systems or tests share one Redis).

    Raises:
        ConfigError: the URL scheme is not supported.
    """
    # No Dramatiq middleware: retries, time limits and age limits are the row's business.
    if url == MEMORY_BROKER:
        return StubBroker(middleware=[])
    client = import_client(url)
    if client is None:
        raise ConfigError(f"unsupported broker URL {url!r}: use memory://, redis://... or "
                          f"amqp://...")
    if url.startswith(REDIS_SCHEMES):
        return client(url=url, namespace=namespace, middleware=[])
    return client(url=url, middleware=[])


def import_client(url: str) -> type[dramatiq.Broker] | None:
    """The Dramatiq broker class of a `redis://` or `amqp://` URL, its client library
    imported now (only by a process that uses it; a process that forks workers imports it
    once, so they share its pages); None for any other URL. Connects to nothing."""
    if url.startswith(REDIS_SCHEMES):
        from dramatiq.brokers.redis import RedisBroker

        return RedisBroker
    if url.startswith(AMQP_SCHEMES):
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker
    return None


class Broker:
    """Our view of the Dramatiq broker: per-queue actors, `send(job_id, queue, delay)` and
    `consume(queues, on_message)`.

    Args:
        url: the broker URL (see `build_dramatiq_broker`).
        namespace: Redis key prefix.
    """

    def __init__(self, url: str, namespace: str) -> None:
        self.url = url
        self.dramatiq = build_dramatiq_broker(url, namespace)
        self._on_message: Callable[[str, int], None] | None = None
        self._listeners: list[Callable[[int, str, float], None]] = []
        self._actors: dict[str, dramatiq.Actor] = {}
        self._doorbells: Doorbells | None = None

    def actor(self, queue: str) -> dramatiq.Actor:
        """The actor of `queue` (declared on first use)."""
        actor = self._actors.get(queue)
        if actor is None:
            def run_job(job_id: int) -> None:
                if self._on_message is None:
                    raise RuntimeError("a message arrived, but nothing consumes this broker")
                self._on_message(queue, job_id)

            run_job.__name__ = ACTOR_PREFIX + queue
            actor = dramatiq.actor(run_job, broker=self.dramatiq, actor_name=ACTOR_PREFIX + queue,
                                   queue_name=queue)
            self._actors[queue] = actor
        return actor

    def declare(self, queues: list[str]) -> None:
        """Declare the actors (and broker queues) for `queues`."""
        for queue in queues:
            self.actor(queue)

    def consume(self, queues: list[str], on_message: Callable[[str, int], None], *,
                threads: int = 8, prefetch: int = 16) -> dramatiq.Worker:
        """A consumer of `queues` (not started: call its `start()`, then `stop(timeout)`).

        Args:
            queues: the queue names.
            on_message: called as `on_message(queue, job_id)` in a consumer thread for
                every message; it replaces the callback of an earlier `consume`.
            threads: consumer threads (they only acknowledge messages and call back).
            prefetch: messages fetched per queue at a time.
        """
        self._on_message = on_message
        self.declare(queues)
        worker = dramatiq.Worker(self.dramatiq, queues=set(queues), worker_threads=threads,
                                 worker_timeout=100)
        worker.queue_prefetch = prefetch
        return worker

    def listen(self, listener: Callable[[int, str, float], None]) -> Callable[[], None]:
        """Call `listener(job_id, queue, delay_seconds)` before every `send` of this broker
        (in the sending thread; tests observe messages with it). Returns a function that
        removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def send(self, job_id: int, queue: str, delay_seconds: float = 0) -> None:
        """Send one row id to `queue` now, to be delivered after `delay_seconds`.

        Raises:
            whatever the broker raises (`dispatching.send` logs it: the sweep resends).
        """
        if self._listeners:
            for listener in list(self._listeners):
                listener(job_id, queue, delay_seconds)
        self._put(job_id, queue, delay_seconds)

    def ring(self, job_id: int, queue: str, delay_seconds: float = 0) -> None:
        """Ring `queue` for row `job_id` (committed), after `delay_seconds`: the
        listeners hear it now, in the calling thread; `memory://` sends it now, a network
        broker through this process's `Doorbells` thread. Never raises for the broker:
        a send that fails is logged (the sweep resends)."""
        if self._listeners:
            for listener in list(self._listeners):
                listener(job_id, queue, delay_seconds)
        if self.url == MEMORY_BROKER:
            self._put_logged(job_id, queue, delay_seconds)
            return
        if self._doorbells is None or self._doorbells.pid != os.getpid():  # new, or forked
            self._doorbells = Doorbells(self._put_logged)
            _RINGERS.append(self._doorbells)
        self._doorbells.put(job_id, queue, delay_seconds)

    def flush(self, timeout_seconds: float = FLUSH_SECONDS) -> bool:
        """Wait up to `timeout_seconds` until every rung message has been sent (or
        failed and logged); True when none is left."""
        bells = self._doorbells
        return bells is None or bells.flush(timeout_seconds)  # a forked copy: True

    def _put(self, job_id: int, queue: str, delay_seconds: float) -> None:
        delay_ms = int(delay_seconds * 1000) if delay_seconds > 0 else None
        self.actor(queue).send_with_options(args=(job_id,), delay=delay_ms)

    def _put_logged(self, job_id: int, queue: str, delay_seconds: float) -> None:
        try:
            self._put(job_id, queue, delay_seconds)
        except Exception as exc:  # the row is the truth; the sweep will resend it
            log.warning("could not send job %s to queue %s (%s); the sweep will resend it",
                        job_id, queue, exc)

    def close(self) -> None:
        """Send what is still rung (up to `FLUSH_SECONDS`), then close the broker's
        connections."""
        self.flush()
        self.dramatiq.close()


def flush_rung(timeout_seconds: float = FLUSH_SECONDS) -> bool:
    """Wait up to `timeout_seconds` (each) until every broker of this process has sent
    what it rang (or failed and logged it): at the exit of the process, and called by a
    process that ends by `os._exit`, which runs no exit hook (a job process: its jobs'
    dispatched rows would wait for the sweep). A forked copy's threads are its parent's.

    Returns:
        True when nothing is left to send.
    """
    return all([bells.flush(timeout_seconds) for bells in _RINGERS if bells.pid == os.getpid()])


atexit.register(flush_rung)


class Doorbells:
    """A process's background sender of rung messages (`Broker.ring`).

    A message is a doorbell: the worker it wakes claims every due row of the queue its
    idle slots can take, not the rung row. So rings that pile up per queue while the
    thread sends are sent as one message per `ROWS_PER_RING` rows rung (the latest row
    ids, at most `DOORBELLS_PER_QUEUE`), and a queue rung again within its gap after its
    last message waits out the gap first, collecting what comes meanwhile (a queue rung
    after a quiet gap is sent at once, also while the thread waits out another queue's
    gap: no added latency). The gap is `RING_GAP_SECONDS`; it doubles, up to
    `RING_GAP_MAX_SECONDS`, after each batch whose rings came faster than one per
    `RING_GAP_SECONDS` (more than 500 a second), and is back to `RING_GAP_SECONDS` after
    any other batch: a process dispatching in a tight loop wakes this thread (a thread
    switch and a GIL hand-over each) ~10x less often, and one dispatching a row every few
    ms is rung as before, also right after a burst.
    A delayed message is sent on its own, for the time it was rung for. The thread starts
    with the first message.

    Args:
        put: `put(job_id, queue, delay_seconds)` sends one message and never raises.
    """

    def __init__(self, put: Callable[[int, str, float], None]) -> None:
        self.pid = os.getpid()
        self._put = put
        self._cond = threading.Condition()
        self._due: dict[str, list[int]] = {}
        self._rung: dict[str, int] = {}  # rings per queue since the last batch
        self._last: dict[str, float] = {}  # monotonic time of each queue's last message
        self._gap: dict[str, float] = {}  # each queue's gap after its last message (s)
        self._later: list[tuple[int, str, float]] = []  # (job id, queue, monotonic due)
        self._sending = False
        self._idle = False  # the thread waits for a message (not out a gap, not sending)
        self._until = 0.0  # while it waits out a gap: when that wait ends (monotonic s)
        self._thread = threading.Thread(target=self._run, name="cronjobs-doorbells",
                                        daemon=True)
        self._thread.start()

    def put(self, job_id: int, queue: str, delay_seconds: float) -> None:
        """Queue one message (`delay_seconds` from now)."""
        with self._cond:
            if delay_seconds > 0:
                self._later.append((job_id, queue, time.monotonic() + delay_seconds))
            else:
                ids = self._due.setdefault(queue, [])
                ids.append(job_id)
                del ids[:-DOORBELLS_PER_QUEUE]
                self._rung[queue] = self._rung.get(queue, 0) + 1
            # Idle, or waiting out another queue's longer gap while this one is due
            # sooner: wake it. Else it is sending, or waits for this queue's own gap: it
            # takes this along.
            if self._idle or self._due_at(queue, delay_seconds) < self._until:
                self._cond.notify_all()  # (a `flush` may wait on the condition too)

    def gap_seconds(self, queue: str) -> float:
        """The gap `queue`'s next message waits out after its last one (seconds)."""
        with self._cond:
            return self._gap.get(queue, RING_GAP_SECONDS)

    def flush(self, timeout_seconds: float) -> bool:
        """Wait up to `timeout_seconds` until nothing is queued or being sent; True then.
        In a process forked from the one that rang (no thread of its own: what it holds
        is the parent's to send), True at once."""
        if self.pid != os.getpid():
            return True
        with self._cond:
            return self._cond.wait_for(
                lambda: not (self._due or self._later or self._sending), timeout_seconds)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._idle = True
                self._cond.wait_for(lambda: self._due or self._later)
                self._idle = False
                while (until := self._gap_end()) > time.monotonic():
                    self._until = until  # the same float `put` compares with: no wake-up
                    self._cond.wait(until - time.monotonic())  # for this queue's own rings
                self._until = 0.0
                due, rung, later = self._due, self._rung, self._later
                self._due, self._rung, self._later, self._sending = {}, {}, [], True
            for queue, ids in due.items():
                count = rung.get(queue, 1)
                rings = min(len(ids), -(-count // ROWS_PER_RING))
                for job_id in ids[-rings:]:
                    self._put(job_id, queue, 0)
                sent_at = time.monotonic()
                self._gap[queue] = self._next_gap(queue, count, sent_at)
                self._last[queue] = sent_at
            now = time.monotonic()
            for job_id, queue, at in later:
                self._put(job_id, queue, max(0.0, at - now))
            with self._cond:
                self._sending = False
                self._cond.notify_all()

    def _next_gap(self, queue: str, count: int, sent_at: float) -> float:
        """`queue`'s gap after a batch of `count` rings sent at `sent_at`: doubled (up to
        `RING_GAP_MAX_SECONDS`) while its rings come faster than one per
        `RING_GAP_SECONDS` since its last message, else `RING_GAP_SECONDS` again."""
        since = sent_at - self._last.get(queue, float("-inf"))
        if count > 1 and since < count * RING_GAP_SECONDS:
            return min(2 * self._gap.get(queue, RING_GAP_SECONDS), RING_GAP_MAX_SECONDS)
        return RING_GAP_SECONDS

    def _due_at(self, queue: str, delay_seconds: float) -> float:
        """When a message rung now for `queue` may be sent: at once for a delayed one or
        a queue with no message yet, else at the end of its gap (monotonic seconds)."""
        if delay_seconds > 0 or queue not in self._last:
            return 0.0
        return self._last[queue] + self._gap.get(queue, RING_GAP_SECONDS)

    def _gap_end(self) -> float:
        """When the due queues may be rung: now if any of them had no message within its
        gap (or a delayed message waits), else the earliest end of their gaps (monotonic
        seconds)."""
        if self._later:
            return 0.0
        return min((self._due_at(queue, 0) for queue in self._due), default=0.0)
