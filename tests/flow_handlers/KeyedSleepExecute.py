"""Test handler: at most 2 rows per `chat` running at once, all workers together; sleeps
`payload["seconds"]`. MAX_RUNTIME 4 s (a short lease for the kill -9 test)."""

import time

from cronjobs import CronJobHandler


class KeyedSleepExecute(CronJobHandler):
    TYPE = "flow.keyed.execute"
    CONCURRENCY = 2
    LIMIT_KEY = "chat"
    MAX_RUNTIME = 4

    def handle(self, payload, job):
        time.sleep(float(payload.get("seconds", 0)))
        return True
