"""DST test task: every UTC hour (a named frequency); does nothing (only the rows it is
started for matter)."""

from cronjobs import CronJobHandler


class UtcHourDiscover(CronJobHandler):
    TYPE = "dst.utchour.discover"
    FREQUENCY = "hour"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True
