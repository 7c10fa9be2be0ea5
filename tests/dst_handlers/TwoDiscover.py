"""DST test task: daily at 02:00 local; does nothing (only the rows it is started for matter)."""

from cronjobs import CronJobHandler


class TwoDiscover(CronJobHandler):
    TYPE = "dst.two.discover"
    FREQUENCY = "0 2 * * *"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True
