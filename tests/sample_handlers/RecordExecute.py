"""Test handler: writes one `test_effects` row per run (start/end times, pid), may sleep."""

import os
import time

from sqlalchemy import text

from cronjobs import CronJobHandler


class RecordExecute(CronJobHandler):
    TYPE = "test.record.execute"
    MAX_RUNTIME = 60

    def handle(self, payload, job):
        started = time.time()
        if payload.get("sleep"):
            time.sleep(float(payload["sleep"]))
        with self.context.app.engine.begin() as conn:
            conn.execute(text("INSERT INTO test_effects (job_id, kind, info, pid, started, ended) "
                              "VALUES (:j, 'record', :i, :p, :s, :e)"),
                         {"j": job.id, "i": str(payload.get("tag", "")), "p": os.getpid(),
                          "s": started, "e": time.time()})
        return True
