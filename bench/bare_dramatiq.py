"""Baseline worker: bare Dramatiq on Redis with a no-op actor (no database at all).

Usage: python -m bench.bare_dramatiq REDIS_URL NAMESPACE THREADS [SLEEP_MS]
Actors: `noop(job_id)`, `sleep(job_id)` (sleeps SLEEP_MS, default 10) and
`stamp(key, sent_at)`, which stores now - sent_at (s) in the Redis hash
`<NAMESPACE>:bench-stamps` (the latency baseline). Stops on SIGTERM.
"""

import signal
import sys
import threading
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker


def declare(broker: dramatiq.Broker, sleep_ms: float = 10) -> dict:
    """Declare the baseline actors on `broker`; returns them by name."""

    def noop(job_id: int) -> None:
        pass

    def sleep(job_id: int) -> None:
        time.sleep(sleep_ms / 1000)

    def stamp(key: str, sent_at: float) -> None:
        broker.client.hset(f"{broker.namespace}:bench-stamps", key, time.time() - sent_at)

    return {name: dramatiq.actor(fn, broker=broker, queue_name="default", actor_name=name)
            for name, fn in (("noop", noop), ("sleep", sleep), ("stamp", stamp))}


def main() -> None:
    url, namespace, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sleep_ms = float(sys.argv[4]) if len(sys.argv) > 4 else 10
    broker = RedisBroker(url=url, namespace=namespace, middleware=[])
    declare(broker, sleep_ms)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=250)
    worker.start()
    stop.wait()
    worker.stop()
    broker.close()


if __name__ == "__main__":
    main()
