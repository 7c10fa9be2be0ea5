"""Benchmark handler: at most 10 starts per rolling second (all workers together); returns
the wall-clock time (`time.time()`, seconds) taken first thing in `handle`."""

import time

from cronjobs import CronJobHandler


class RatedStampExecute(CronJobHandler):
    TYPE = "bench.ratedstamp.execute"
    RATE_LIMIT = "10/s"

    def handle(self, payload, job):
        started = time.time()
        return {"success": True, "result": {"t": started}}
