"""Benchmark handler: sleeps `payload["ms"]` milliseconds (default 10) in time.sleep, an
I/O-bound job that holds its slot without using the CPU."""

import time

from cronjobs import CronJobHandler


class SleepExecute(CronJobHandler):
    TYPE = "bench.sleep.execute"

    def handle(self, payload, job):
        time.sleep(float(payload.get("ms", 10)) / 1000)
        return True
