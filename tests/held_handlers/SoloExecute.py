"""Test handler: one row of a `chat` running at a time; does nothing."""

from cronjobs import CronJobHandler


class SoloExecute(CronJobHandler):
    TYPE = "held.solo.execute"
    QUEUE = "solo"
    CONCURRENCY = 1
    LIMIT_KEY = "chat"

    def handle(self, payload, job):
        return True
