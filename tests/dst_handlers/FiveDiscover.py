"""DST test task: every 5 minutes; does nothing (only the rows it is started for matter)."""

from cronjobs import CronJobHandler


class FiveDiscover(CronJobHandler):
    TYPE = "dst.five.discover"
    FREQUENCY = "*/5 * * * *"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True
