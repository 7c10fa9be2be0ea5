"""Built-in maintenance: delete old finished rows, daily."""

from __future__ import annotations

from cronjobs import CronJobHandler, Job


class Cleanup(CronJobHandler):
    """Runs `cronjobs.queue.cleanup()` through the queue itself, once a day.

    It deletes only cronjobs' own finished rows past their retention, so it ships
    enabled. Result: `{"completed": n, "failed": n, "cancelled": n}` rows deleted.
    """

    TYPE = "cronjobs.cleanup.execute"
    FREQUENCY = "day"
    MAX_ATTEMPTS = 3
    MAX_RUNTIME = 600
    DISPATCH_SCOPE = "admin"  # POST /api/jobs needs an admin token (docs/api.md)
    QUEUE = "maintenance"

    def handle(self, payload: dict, job: Job) -> dict:
        """Delete finished rows older than the configured retention."""
        from cronjobs.queue import cleanup  # lazy: CLI start-up time

        counts = cleanup(payload.get("retention"), app=self.context.app)
        return {"success": True, "result": counts}
