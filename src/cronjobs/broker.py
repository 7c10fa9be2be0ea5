"""The Dramatiq side: build the broker from a URL, declare one actor per queue, send row ids.

Messages carry only a row id, and a message is a doorbell: in a worker the actor calls the
worker's `on_message(queue, job_id)`, which only rings the worker's pool ("queue `q` may
have due rows"); the pool's loop then claims the best due rows of the queue (priority,
then age) for its idle slots. So the broker's FIFO order never overrides a row's priority,
and a duplicated or stray message is harmless. A process that only sends (the dashboard,
the scheduler, your application) never consumes and needs no callback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import dramatiq
from dramatiq.brokers.stub import StubBroker

from .config import AMQP_SCHEMES, MEMORY_BROKER, REDIS_SCHEMES
from .errors import ConfigError

log = logging.getLogger("cronjobs.broker")

ACTOR_PREFIX = "cronjobs_run_"


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
    # The Redis and RabbitMQ clients are imported only by a process that uses them.
    if url.startswith(REDIS_SCHEMES):
        from dramatiq.brokers.redis import RedisBroker

        return RedisBroker(url=url, namespace=namespace, middleware=[])
    if url.startswith(AMQP_SCHEMES):
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=url, middleware=[])
    raise ConfigError(f"unsupported broker URL {url!r}: use memory://, redis://... or amqp://...")


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
        """Send one row id to `queue`, to be delivered after `delay_seconds`.

        Raises:
            whatever the broker raises (`dispatching.send` logs it: the sweep resends).
        """
        if self._listeners:
            for listener in list(self._listeners):
                listener(job_id, queue, delay_seconds)
        delay_ms = int(delay_seconds * 1000) if delay_seconds > 0 else None
        self.actor(queue).send_with_options(args=(job_id,), delay=delay_ms)

    def close(self) -> None:
        """Close the broker's connections."""
        self.dramatiq.close()
