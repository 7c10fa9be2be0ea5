"""Built-in maintenance: put rows of lost workers back to work, every minute."""

from __future__ import annotations

from cronjobs import CronJobHandler, Job


class RecoverStale(CronJobHandler):
    """Runs `cronjobs.queue.recover_stale()` through the queue itself, every minute.

    Result: `{"recovered": n}`.
    """

    TYPE = "cronjobs.recoverstale.execute"
    FREQUENCY = "minute"
    MAX_ATTEMPTS = 1
    MAX_RUNTIME = 60
    DISPATCH_SCOPE = "admin"  # POST /api/jobs needs an admin token (docs/api.md)
    QUEUE = "maintenance"
    # Not "skip": this task is what takes back rows of killed workers, its own included;
    # a run of it left `running` by a killed worker must not stop the next one.
    OVERLAP = "allow"

    def handle(self, payload: dict, job: Job) -> dict:
        """Recover stale rows; `payload["minutes"]` overrides the configured minutes."""
        from cronjobs.queue import recover_stale  # lazy: CLI start-up time

        count = recover_stale(payload.get("minutes"), app=self.context.app)
        return {"success": True, "result": {"recovered": count}}
