"""Test handler with ISOLATION = "thread": records its start and pid, then sleeps
`payload["seconds"]`. MAX_RUNTIME 900 s: only a Stop ends it early."""

import os
import time

from sqlalchemy import text

from cronjobs import CronJobHandler


class ThreadLongSleepExecute(CronJobHandler):
    TYPE = "test.threadlongsleep.execute"
    ISOLATION = "thread"
    MAX_RUNTIME = 900
    MAX_ATTEMPTS = 3

    def handle(self, payload, job):
        with self.context.app.engine.begin() as conn:
            conn.execute(text("INSERT INTO test_effects (job_id, kind, info, pid, started, ended) "
                              "VALUES (:j, 'threadlong-start', '', :p, :t, :t)"),
                         {"j": job.id, "p": os.getpid(), "t": time.time()})
        time.sleep(float(payload["seconds"]))
        return True
