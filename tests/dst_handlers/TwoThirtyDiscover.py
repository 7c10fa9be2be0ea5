"""DST test task: daily at 02:30 local (inside both DST hours of Europe/Berlin); does
nothing (only the rows it is started for matter)."""

from cronjobs import CronJobHandler


class TwoThirtyDiscover(CronJobHandler):
    TYPE = "dst.twothirty.discover"
    FREQUENCY = "30 2 * * *"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True
