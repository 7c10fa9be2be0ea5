"""Test task: every minute, records one `test_effects` row and returns cancelled (no
children), so its row is deleted and cannot prove the slot ran."""

import os
import time

from sqlalchemy import text

from cronjobs import CronJobHandler


class CountDiscover(CronJobHandler):
    TYPE = "test.count.discover"
    FREQUENCY = "minute"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        with self.context.app.engine.begin() as conn:
            conn.execute(text("INSERT INTO test_effects (job_id, kind, info, pid, started, ended) "
                              "VALUES (:j, 'count', :i, :p, :s, :s)"),
                         {"j": job.id, "i": payload.get("slot", "manual"), "p": os.getpid(),
                          "s": time.time()})
        return {"success": True, "status": "cancelled", "result": {"reason": "no-targets"}}
