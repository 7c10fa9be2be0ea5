"""Test handler: a limit key (`chat`) and no limit, so blocks hold one chat; does nothing."""

from cronjobs import CronJobHandler


class KeyOnlyExecute(CronJobHandler):
    TYPE = "flow.keyonly.execute"
    LIMIT_KEY = "chat"

    def handle(self, payload, job):
        return True
