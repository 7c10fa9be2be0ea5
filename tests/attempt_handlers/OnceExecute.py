"""Test handler: MAX_ATTEMPTS 1 (never repeat), MAX_RUNTIME 600 s. Fails when the payload
says `fail`, else returns the `max_attempts` its row was run with."""

from cronjobs import CronJobHandler


class OnceExecute(CronJobHandler):
    TYPE = "test.once.execute"
    MAX_ATTEMPTS = 1
    MAX_RUNTIME = 600

    def handle(self, payload, job):
        if payload.get("fail"):
            raise RuntimeError("failed on purpose")
        return {"success": True, "result": {"max_attempts": job.max_attempts}}
