"""Test handler that misbehaves as `payload["do"]` says: `exit` (its job process exits with
status 3), `sleep` (a blocking `time.sleep(payload["seconds"])`), `deaf` (ignores SIGALRM,
then sleeps: only SIGKILL stops it), `log` (logs `payload["line"]` as a warning of logger
`test.misbehave`); anything else returns True."""

import logging
import os
import signal
import time

from cronjobs import CronJobHandler


class MisbehaveExecute(CronJobHandler):
    TYPE = "test.misbehave.execute"
    MAX_RUNTIME = 30
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        do = payload.get("do")
        if do == "log":
            logging.getLogger("test.misbehave").warning(payload["line"])
        if do == "exit":
            os._exit(3)
        if do == "deaf":
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
        if do in ("sleep", "deaf"):
            time.sleep(float(payload.get("seconds", 30)))
        return True
