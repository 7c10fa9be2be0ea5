"""Test handler: records its start, then sleeps `payload["seconds"]` in time.sleep (a
blocking system call) and records its end. MAX_RUNTIME is 2 s."""

import os
import time

from sqlalchemy import text

from cronjobs import CronJobHandler


class SleepExecute(CronJobHandler):
    TYPE = "test.sleep.execute"
    MAX_RUNTIME = 2

    def _record(self, job, kind):
        with self.context.app.engine.begin() as conn:
            conn.execute(text("INSERT INTO test_effects (job_id, kind, info, pid, started, ended) "
                              "VALUES (:j, :k, '', :p, :t, :t)"),
                         {"j": job.id, "k": kind, "p": os.getpid(), "t": time.time()})

    def handle(self, payload, job):
        self._record(job, "sleep-start")
        time.sleep(float(payload["seconds"]))
        self._record(job, "sleep-end")
        return True
