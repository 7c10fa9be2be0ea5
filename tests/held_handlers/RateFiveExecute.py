"""Test handler: at most 5 starts per rolling second, all workers together (the browser
test of rows held by a rate limit); does nothing."""

from cronjobs import CronJobHandler


class RateFiveExecute(CronJobHandler):
    TYPE = "held.ratefive.execute"
    QUEUE = "rated"
    RATE_LIMIT = "5/s"

    def handle(self, payload, job):
        return True
