"""Test handler: on its first attempt, stuck where the MAX_RUNTIME alarm cannot reach it —
`payload["how"]` "sigmask" blocks SIGALRM and sleeps 60 s, "c-loop" runs a C loop that
holds the interpreter for hours ("sleep" sleeps 60 s: the alarm ends it); later attempts
return at once. Records each start (and a later attempt's end) in `test_effects` (`info`:
the attempt). At most 2 at once (CONCURRENCY), MAX_RUNTIME 2 s."""

import os
import signal
import time

from sqlalchemy import text

from cronjobs import CronJobHandler


class StuckExecute(CronJobHandler):
    TYPE = "deadline.stuck.execute"
    CONCURRENCY = 2
    MAX_RUNTIME = 2
    MAX_ATTEMPTS = 3

    def _record(self, job, kind, started, ended=None):
        with self.context.app.engine.begin() as conn:
            conn.execute(text("INSERT INTO test_effects (job_id, kind, info, pid, started, ended) "
                              "VALUES (:j, :k, :i, :p, :s, :e)"),
                         {"j": job.id, "k": kind, "i": str(job.attempts), "p": os.getpid(),
                          "s": started, "e": ended})

    def handle(self, payload, job):
        started = time.time()
        self._record(job, "stuck-start", started)
        if job.attempts > 1:
            self._record(job, "stuck-end", started, time.time())
            return True
        if payload["how"] in ("sigmask", "sleep"):
            if payload["how"] == "sigmask":
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(60)
        else:
            sum(range(10**12))  # no signal handler runs until it returns
        return True
