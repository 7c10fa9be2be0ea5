"""Test handler that misbehaves as `payload["do"]` says: `exit` (its job process exits with
status 3), `sleep` (a blocking `time.sleep(payload["seconds"])`), `deaf` (ignores SIGALRM,
then sleeps: only SIGKILL stops it), `log` (logs `payload["line"]` as a warning of logger
`test.misbehave`), `leak` (creates the shared-memory segment `payload["name"]`, then
exits as `exit` does), `facts` (returns whether it runs with the fork server's preloaded App,
its pid and the name of its process as `ps` shows it); anything else returns True."""

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
        if do == "facts":  # how this job process runs jobs (tests/test_lean_start.py)
            from cronjobs.worker.jobprocess import preloaded

            with open("/proc/self/comm") as comm:
                name = comm.read().strip()
            return {"success": True, "result": {
                "preloaded_app": preloaded() is self.context.app, "pid": os.getpid(),
                "process_name": name}}
        if do == "log":
            logging.getLogger("test.misbehave").warning(payload["line"])
        if do == "leak":  # a shared-memory segment left behind by a process that dies
            from multiprocessing import shared_memory

            shared_memory.SharedMemory(name=payload["name"], create=True, size=4096)
            os._exit(3)
        if do == "exit":
            os._exit(3)
        if do == "deaf":
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
        if do in ("sleep", "deaf"):
            time.sleep(float(payload.get("seconds", 30)))
        return True
