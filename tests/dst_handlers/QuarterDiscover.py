"""DST test task: every 15 minutes; does nothing (only the rows it is started for matter)."""

from cronjobs import CronJobHandler


class QuarterDiscover(CronJobHandler):
    TYPE = "dst.quarter.discover"
    FREQUENCY = "*/15 * * * *"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True
