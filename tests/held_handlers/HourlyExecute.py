"""Test handler: at most 5 starts an hour, all workers together; does nothing."""

from cronjobs import CronJobHandler


class HourlyExecute(CronJobHandler):
    TYPE = "held.hourly.execute"
    QUEUE = "hourly"
    RATE_LIMIT = "5/h"

    def handle(self, payload, job):
        return True
