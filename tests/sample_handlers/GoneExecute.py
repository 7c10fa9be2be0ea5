"""Test handler whose module is "not installed": available() is False."""

from cronjobs import CronJobHandler


class GoneExecute(CronJobHandler):
    TYPE = "test.gone.execute"

    def handle(self, payload, job):
        return True

    @classmethod
    def available(cls):
        return False
