"""The Dramatiq side: build the broker from a URL, declare one actor per queue, send row ids.

Messages carry only a row id. The actor asks the executor to claim the best due row of
its queue (priority, then age), so the broker's FIFO order never overrides a row's
priority, and a duplicated or stray message is harmless.
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
    if url.startswith(REDIS_SCHEMES):
        from dramatiq.brokers.redis import RedisBroker

        return RedisBroker(url=url, namespace=namespace, middleware=[])
    if url.startswith(AMQP_SCHEMES):
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=url, middleware=[])
    raise ConfigError(f"unsupported broker URL {url!r}: use memory://, redis://... or amqp://...")


class Broker:
    """Our view of the Dramatiq broker: per-queue actors and `send(job_id, queue, delay)`.

    Args:
        url: the broker URL (see `build_dramatiq_broker`).
        namespace: Redis key prefix.
        handle: called by the actor as `handle(queue, job_id)` in the worker.
    """

    def __init__(self, url: str, namespace: str, handle: Callable[[str, int], None]) -> None:
        self.url = url
        self.dramatiq = build_dramatiq_broker(url, namespace)
        self._handle = handle
        self._actors: dict[str, dramatiq.Actor] = {}

    def actor(self, queue: str) -> dramatiq.Actor:
        """The actor that consumes `queue` (declared on first use)."""
        actor = self._actors.get(queue)
        if actor is None:
            handle = self._handle

            def run_job(job_id: int) -> None:
                handle(queue, job_id)

            run_job.__name__ = ACTOR_PREFIX + queue
            actor = dramatiq.actor(run_job, broker=self.dramatiq, actor_name=ACTOR_PREFIX + queue,
                                   queue_name=queue)
            self._actors[queue] = actor
        return actor

    def declare(self, queues: list[str]) -> None:
        """Declare the actors (and broker queues) for `queues`."""
        for queue in queues:
            self.actor(queue)

    def send(self, job_id: int, queue: str, delay_seconds: float = 0) -> None:
        """Send one row id to `queue`, to be delivered after `delay_seconds`."""
        delay_ms = int(delay_seconds * 1000) if delay_seconds > 0 else None
        self.actor(queue).send_with_options(args=(job_id,), delay=delay_ms)

    def close(self) -> None:
        """Close the broker's connections."""
        self.dramatiq.close()
