"""Test handler: one row of a `chat` at a time; a row whose payload has `flood` raises a
flood wait of that many seconds that blocks its chat, on its first run only (a row put
back has a process log)."""

from cronjobs import CronJobHandler, RetryLater


class FloodExecute(CronJobHandler):
    TYPE = "flow.flood.execute"
    CONCURRENCY = 1
    LIMIT_KEY = "chat"

    def handle(self, payload, job):
        if payload.get("flood") and not job.process_logs:
            raise RetryLater(payload["flood"], "FloodWait", block="key")
        return True
