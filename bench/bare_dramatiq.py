"""Baseline worker: bare Dramatiq on Redis with a no-op actor (no database at all).

Usage: python bare_dramatiq.py REDIS_URL NAMESPACE THREADS
"""

import signal
import sys
import threading

import dramatiq
from dramatiq.brokers.redis import RedisBroker

url, namespace, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
broker = RedisBroker(url=url, namespace=namespace, middleware=[])


@dramatiq.actor(broker=broker, queue_name="default", actor_name="noop")
def noop(job_id: int) -> None:
    pass


if __name__ == "__main__":
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=250)
    worker.start()
    stop.wait()
    worker.stop()
