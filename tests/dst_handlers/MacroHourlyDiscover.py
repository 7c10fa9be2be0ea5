"""DST test task: the @hourly macro; does nothing (only the rows it is started for matter)."""

from cronjobs import CronJobHandler


class MacroHourlyDiscover(CronJobHandler):
    TYPE = "dst.macrohourly.discover"
    FREQUENCY = "@hourly"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True
