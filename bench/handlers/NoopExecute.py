"""Benchmark handler: does nothing, so the queue's own cost is what is measured."""

from cronjobs import CronJobHandler


class NoopExecute(CronJobHandler):
    TYPE = "bench.noop.execute"

    def handle(self, payload, job):
        return True
