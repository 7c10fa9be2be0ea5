"""Test handler: connects to `payload["port"]` on 127.0.0.1 and blocks in socket.recv()
with no timeout (the server never answers). MAX_RUNTIME is 2 s."""

import os
import socket
import time

from sqlalchemy import text

from cronjobs import CronJobHandler


class BlockRecvExecute(CronJobHandler):
    TYPE = "test.blockrecv.execute"
    MAX_RUNTIME = 2

    def handle(self, payload, job):
        with self.context.app.engine.begin() as conn:
            conn.execute(text("INSERT INTO test_effects (job_id, kind, info, pid, started, ended) "
                              "VALUES (:j, 'recv-start', '', :p, :t, :t)"),
                         {"j": job.id, "p": os.getpid(), "t": time.time()})
        sock = socket.create_connection(("127.0.0.1", int(payload["port"])))
        sock.settimeout(None)
        sock.recv(1)  # never answered
        return True
