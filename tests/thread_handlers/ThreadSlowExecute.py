"""Fault-test handler with ISOLATION = "thread": SlowExecute's work (sleeps
`payload["seconds"]`, records one `test_effects` row with its start and end) in a thread
of the worker itself, so kill -9 of the worker ends the job with it."""

import os
import time

from sqlalchemy import text

from cronjobs import CronJobHandler


class ThreadSlowExecute(CronJobHandler):
    TYPE = "test.threadslow.execute"
    ISOLATION = "thread"
    MAX_RUNTIME = 8
    MAX_ATTEMPTS = 5

    def handle(self, payload, job):
        started = time.time()
        time.sleep(float(payload.get("seconds", 1)))
        with self.context.app.engine.begin() as conn:
            conn.execute(text("INSERT INTO test_effects (job_id, kind, info, pid, started, ended) "
                              "VALUES (:j, 'slow', '', :p, :s, :e)"),
                         {"j": job.id, "p": os.getpid(), "s": started, "e": time.time()})
        return True
