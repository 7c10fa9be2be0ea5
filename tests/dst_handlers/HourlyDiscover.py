"""DST test task: at minute 0 of every hour, in CRONJOBS_TIMEZONE; does nothing (only the
rows it is started for matter)."""

from cronjobs import CronJobHandler


class HourlyDiscover(CronJobHandler):
    TYPE = "dst.hourly.discover"
    FREQUENCY = "0 * * * *"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True
