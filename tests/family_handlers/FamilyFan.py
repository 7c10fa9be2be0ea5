"""Test family (tests/test_family_workers.py): a discover that dispatches `children` no-op
rows in batches, and callbacks that return what they saw (`family.counts`) as their
result. With FAMILY_DOUBLE_DELIVERY=1 in the worker's environment, every message this
process sends is sent a second time (a listener of the public `Broker.listen`)."""

import logging
import os
import threading

from cronjobs import CronJobHandler, queue

ITEM = "famw.item.execute"
_DOUBLED: set[int] = set()  # id() of the brokers whose messages are doubled
_SENDING = threading.local()
_LOCK = threading.Lock()
log = logging.getLogger("cronjobs.famw")


def double_delivery(app) -> None:
    """Send every message of `app`'s broker twice from now on (once per broker)."""
    if os.environ.get("FAMILY_DOUBLE_DELIVERY") != "1":
        return
    broker = app.broker
    with _LOCK:
        if id(broker) in _DOUBLED:
            return
        _DOUBLED.add(id(broker))

    def again(job_id: int, queue_name: str, delay_seconds: float) -> None:
        if getattr(_SENDING, "busy", False):
            return
        _SENDING.busy = True
        try:
            log.warning("sent twice: job %s (queue %s)", job_id, queue_name)
            broker.send(job_id, queue_name, delay_seconds)
        finally:
            _SENDING.busy = False

    broker.listen(again)


class FamilyFan(CronJobHandler):
    TYPE = "famw.fan.discover"
    ISOLATION = "thread"
    MAX_ATTEMPTS = 1
    MAX_RUNTIME = 60

    def handle(self, payload, job):
        double_delivery(self.context.app)
        n = int(payload.get("children", 0))
        for start in range(0, n, 1000):
            queue.dispatch_many([{"type": ITEM, "payload": {}, "parent_id": job.id}]
                                * min(1000, n - start), app=self.context.app)
        return True

    def _seen(self, kind, family):
        double_delivery(self.context.app)
        return {"success": True, "result": {"kind": kind, "counts": family.counts,
                                            "generation": family.generation}}

    def on_complete(self, family, job):
        return self._seen("complete", family)

    def on_success(self, family, job):
        return self._seen("success", family)

    def on_failure(self, family, job):
        return self._seen("failure", family)


class FamilyItem(CronJobHandler):
    """A no-op child; a short MAX_RUNTIME so that a killed worker's rows are taken back
    by recover-stale within seconds (lease: MAX_RUNTIME + the lease grace)."""

    TYPE = ITEM
    ISOLATION = "thread"
    MAX_ATTEMPTS = 5
    MAX_RUNTIME = 2

    def handle(self, payload, job):
        double_delivery(self.context.app)
        return True
