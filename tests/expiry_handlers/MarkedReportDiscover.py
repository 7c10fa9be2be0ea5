"""Test handler: every minute, a slot's run may start up to 60 s after its slot
(STARTING_DEADLINE); `handle()` touches the file named by `EXPIRY_MARKER`, so a test can
tell that it never ran. Queue `expiry`."""

import os
from pathlib import Path

from cronjobs import CronJobHandler


class MarkedReportDiscover(CronJobHandler):
    TYPE = "marked.report.discover"
    FREQUENCY = "minute"
    STARTING_DEADLINE = 60
    QUEUE = "expiry"

    def handle(self, payload, job):
        Path(os.environ["EXPIRY_MARKER"]).touch()
        return True
