"""Load generators run as their own processes (so they compete for the CPU as an
application would, not inside the measuring process).

Usage:
    python -m bench.producer cronjobs DB_URL NAMESPACE SECONDS BACKLOG BATCH
        `dispatch_many` batches of BATCH no-op rows while fewer than BACKLOG are pending.
    python -m bench.producer celery NAMESPACE SECONDS BACKLOG
        Celery `send_task` one by one while fewer than BACKLOG messages are queued.
    python -m bench.producer loop DB_URL NAMESPACE SECONDS
        keyed `dispatch` one by one, as fast as it goes; records each call's latency.

Every mode stops after SECONDS or on SIGTERM and prints one JSON line:
`{"sent": n, "seconds": s}` (plus `"latencies_ms": [...]` for `loop`). Redis key
`<NAMESPACE>:bench-sent` holds the running count of messages sent.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time

import redis

from .stores import NOOP, REDIS


def _stopper(seconds: float) -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    timer = threading.Timer(seconds, stop.set)
    timer.daemon = True
    timer.start()
    return stop


def cronjobs(url: str, ns: str, seconds: float, backlog: int, batch: int) -> dict:
    """Keep up to `backlog` no-op rows pending with `dispatch_many` batches."""
    from cronjobs import queue

    from . import stores

    app = stores.make_app(url, ns)
    client = redis.Redis.from_url(REDIS)
    stop, sent, start = _stopper(seconds), 0, time.monotonic()
    while not stop.is_set():
        if stores.count_rows(app.engine, "pending") >= backlog:
            stop.wait(0.01)
            continue
        queue.dispatch_many([{"type": NOOP}] * batch, app=app)
        sent += batch
        client.set(f"{ns}:bench-sent", sent)
    app.close()
    return {"sent": sent, "seconds": time.monotonic() - start}


def celery(ns: str, seconds: float, backlog: int) -> dict:
    """Keep up to `backlog` no-op messages queued with Celery's `send_task`."""
    from .celery_app import make_app, queue_keys

    app = make_app(ns)
    client = redis.Redis.from_url(REDIS)
    key = queue_keys(ns)[0]
    stop, sent, start = _stopper(seconds), 0, time.monotonic()
    while not stop.is_set():
        if client.llen(key) >= backlog:
            stop.wait(0.01)
            continue
        for _ in range(100):
            app.send_task("noop", args=(sent,), queue=ns)
            sent += 1
        client.set(f"{ns}:bench-sent", sent)
    app.close()
    return {"sent": sent, "seconds": time.monotonic() - start}


def loop(url: str, ns: str, seconds: float) -> dict:
    """Keyed `dispatch` one by one; the latency of every call in ms."""
    import uuid

    from cronjobs import queue

    from . import stores

    app = stores.make_app(url, ns)
    run = uuid.uuid4().hex[:8]
    stop, latencies, start = _stopper(seconds), [], time.monotonic()
    while not stop.is_set():
        t = time.perf_counter()
        queue.dispatch(NOOP, {"i": len(latencies)}, idempotency_key=f"loop-{run}-{len(latencies)}",
                       app=app)
        latencies.append(round((time.perf_counter() - t) * 1000, 3))
    app.close()
    return {"sent": len(latencies), "seconds": time.monotonic() - start,
            "latencies_ms": latencies}


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "cronjobs":
        out = cronjobs(args[0], args[1], float(args[2]), int(args[3]), int(args[4]))
    elif mode == "celery":
        out = celery(args[0], float(args[1]), int(args[2]))
    elif mode == "loop":
        out = loop(args[0], args[1], float(args[2]))
    else:
        raise SystemExit(f"unknown mode {mode!r}: cronjobs, celery or loop")
    print(json.dumps(out), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
