"""Test handler: at most 10 starts per rolling second, all workers together; does nothing."""

from cronjobs import CronJobHandler


class RatedExecute(CronJobHandler):
    TYPE = "flow.rated.execute"
    RATE_LIMIT = "10/s"

    def handle(self, payload, job):
        return True
