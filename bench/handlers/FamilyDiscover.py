"""Benchmark family (bench/families.py): a discover that dispatches `children` no-op rows
(`bench.noop.execute`, the rows the parentless baseline drains) in batches of 1,000, and
an `on_complete` that returns the counts it saw."""

from cronjobs import CronJobHandler, queue


class FamilyDiscover(CronJobHandler):
    TYPE = "bench.family.discover"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        n = int(payload.get("children", 0))
        for start in range(0, n, 1000):
            queue.dispatch_many([{"type": "bench.noop.execute", "parent_id": job.id}]
                                * min(1000, n - start), app=self.context.app)
        return True

    def on_complete(self, family, job):
        return {"success": True, "result": {"counts": family.counts}}
