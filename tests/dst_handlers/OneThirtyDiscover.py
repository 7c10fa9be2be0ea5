"""DST test task: daily at 01:30 local (inside New York's repeated hour); does nothing
(only the rows it is started for matter)."""

from cronjobs import CronJobHandler


class OneThirtyDiscover(CronJobHandler):
    TYPE = "dst.onethirty.discover"
    FREQUENCY = "30 1 * * *"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True
