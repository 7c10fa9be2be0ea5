"""Test handler that forks when `payload["fork"]`, and lets the child return from
`handle()` too (a handler bug the job process must survive). Returns its own job id."""

import os

from cronjobs import CronJobHandler


class ForkReturnExecute(CronJobHandler):
    TYPE = "test.forkreturn.execute"
    MAX_RUNTIME = 10

    def handle(self, payload, job):
        if payload.get("fork"):
            os.fork()  # parent and child both return below
        return {"success": True, "result": {"job": job.id}}
