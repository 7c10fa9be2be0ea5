"""Baseline: a Celery app on the same Redis, for `celery -A bench.celery_app worker`.

Its queue and every Redis key live under the prefix in `BENCH_CELERY_NS` (kombu's
`global_keyprefix`), so runs never see each other's messages. No result backend: the
benchmark counts what is left on the queue. Tasks: `noop(i)` and `sleep(i, ms)`.
`push()` fills a queue quickly for the drain scenarios.
"""

import json
import os
import time

from celery import Celery

NS = os.environ.get("BENCH_CELERY_NS", "cjbench-celery")
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")


def make_app(ns: str) -> Celery:
    """A Celery app whose queue is `ns` and whose Redis keys start with `ns:`."""
    celery = Celery("bench", broker=REDIS)
    celery.conf.update(
        task_default_queue=ns,
        broker_transport_options={"global_keyprefix": ns + ":"},
        task_ignore_result=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        broker_connection_retry_on_startup=True,
    )

    @celery.task(name="noop")
    def noop(i):
        return None

    @celery.task(name="sleep")
    def sleep(i, ms):
        time.sleep(ms / 1000)

    return celery


def queue_keys(ns: str) -> tuple[str, str]:
    """Redis keys of the queue list and of the unacknowledged-messages hash of `ns`."""
    return f"{ns}:{ns}", f"{ns}:unacked"


_templates: dict = {}


def push(ns: str, n: int, task: str = "noop", args: tuple = (0,)) -> None:
    """Put `n` messages for `task` on the queue of `ns`, fast.

    One message is sent the normal way (`send_task`, ~1 ms each here), taken back and
    copied `n` times with fresh task ids and delivery tags through a Redis pipeline, so
    that filling a queue of 20,000 does not take 20 s. Workers see ordinary messages.
    """
    import uuid

    import redis

    client = redis.Redis.from_url(REDIS)
    key = queue_keys(ns)[0]
    template = _templates.get((ns, task))
    if template is None:
        # Captured from a side queue, so a running worker cannot take it first.
        celery = make_app(ns)
        celery.send_task(task, args=args, queue=ns + "-capture")
        celery.close()
        raw = client.rpop(f"{ns}:{ns}-capture").decode()
        message = json.loads(raw)
        template = (raw.replace(message["headers"]["id"], "{id}")
                    .replace(message["properties"]["delivery_tag"], "{tag}")
                    .replace(f'"routing_key": "{ns}-capture"', f'"routing_key": "{ns}"'))
        _templates[(ns, task)] = template
    for start in range(0, n, 1000):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(1000, n - start)):
            pipe.lpush(key, template.replace("{id}", str(uuid.uuid4()))
                       .replace("{tag}", str(uuid.uuid4())))
        pipe.execute()
    client.close()


app = make_app(NS)
