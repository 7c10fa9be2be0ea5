"""Benchmark handler: does nothing, at most 2 rows per `key` running at once (all workers
together): the cost of a per-key limit in the claim."""

from cronjobs import CronJobHandler


class KeyedNoopExecute(CronJobHandler):
    TYPE = "bench.keyednoop.execute"
    CONCURRENCY = 2
    LIMIT_KEY = "key"

    def handle(self, payload, job):
        return True
