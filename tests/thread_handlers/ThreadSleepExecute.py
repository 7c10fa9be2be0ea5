"""Test handler with ISOLATION = "thread": records its pid, then sleeps `payload["seconds"]`."""

import os
import time

from sqlalchemy import text

from cronjobs import CronJobHandler


class ThreadSleepExecute(CronJobHandler):
    TYPE = "test.threadsleep.execute"
    ISOLATION = "thread"
    MAX_RUNTIME = 2
    MAX_ATTEMPTS = 2

    def handle(self, payload, job):
        with self.context.app.engine.begin() as conn:
            conn.execute(text("INSERT INTO test_effects (job_id, kind, info, pid, started, ended) "
                              "VALUES (:j, 'thread', '', :p, :s, :s)"),
                         {"j": job.id, "p": os.getpid(), "s": time.time()})
        time.sleep(float(payload.get("seconds", 0)))
        return True
