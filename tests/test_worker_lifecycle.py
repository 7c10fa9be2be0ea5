"""With real processes on MariaDB + Redis: the MAX_RUNTIME alarm for blocked
handlers, graceful stop, recycling, heartbeats and the daily log file — in every execution
mode the CLI offers (`--isolation handler`, the default, and `--isolation process`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from conftest import REDIS, cli_env, effect_rows, run_cli
from cronjobs import queue
from test_worker_e2e import RECORD, _tail, all_completed, wait_for, worker

pytestmark = [pytest.mark.parametrize("backend", ["mariadb"], indirect=True),
              pytest.mark.slow]


MODES = pytest.mark.parametrize("isolation", ["handler", "process"])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_timed_out(app, job_id: int, kind: str, proc, log) -> None:
    """The job was stopped within MAX_RUNTIME (2 s) + grace, its process is gone, the row
    waits for its next attempt, and the worker still serves other jobs."""
    start = wait_for(lambda: effect_rows(app, kind), 30, f"{kind} effect", proc, log)[0]
    row = wait_for(lambda: (r := queue.get(job_id, app=app))["error"] and r, 30,
                   "the timeout", proc, log)
    started = datetime.fromtimestamp(start["started"], UTC).replace(tzinfo=None)
    stopped_after = (row["updated_at"] - started).total_seconds()
    assert stopped_after <= 10, stopped_after
    assert row["error"].startswith("timeout after 2 s"), row["error"]
    assert row["status"] == "pending" and row["attempts"] == 1
    assert row["scheduled_at"] - row["updated_at"] == timedelta(minutes=2)
    assert not pid_alive(start["pid"]), "the blocked job process was killed"
    assert "timeout after 2 s" in row["process_logs"]
    other = queue.dispatch(RECORD, {"tag": "after"}, app=app)
    wait_for(lambda: queue.get(other, ["status"], app=app)["status"] == "completed", 30,
             "another job on the same worker", proc, log)
    assert len(effect_rows(app, kind)) == 1, "no second copy ran"


@pytest.mark.core
@MODES
def test_a_handler_sleeping_600_s_is_stopped(make_app, db_url, namespace, tmp_path, isolation):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=2, isolation=isolation,
                CRONJOBS_LOG_LEVEL="INFO") as proc:
        job_id = queue.dispatch("test.sleep.execute", {"seconds": 600}, app=app)
        assert_timed_out(app, job_id, "sleep-start", proc, log)


@pytest.mark.core
@MODES
def test_a_handler_blocked_in_recv_is_stopped(make_app, db_url, namespace, tmp_path, isolation):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel accepts connections; nobody ever answers
    try:
        with worker(db_url, namespace, log, threads=2, isolation=isolation) as proc:
            job_id = queue.dispatch("test.blockrecv.execute",
                                    {"port": silent.getsockname()[1]}, app=app)
            assert_timed_out(app, job_id, "recv-start", proc, log)
    finally:
        silent.close()


@MODES
@pytest.mark.parametrize("shutdown_timeout,expected", [(10, "completed"), (1, "pending")])
def test_sigterm_during_a_5_s_job(make_app, db_url, namespace, tmp_path, shutdown_timeout,
                                  expected, isolation):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_LOG_LEVEL="INFO")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--queues",
                                 "default", "--threads", "2", "--isolation", isolation,
                                 "--shutdown-timeout", str(shutdown_timeout)], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        job_id = queue.dispatch("test.slow.execute", {"seconds": 5}, app=app)
        wait_for(lambda: queue.get(job_id, ["status"], app=app)["status"] == "running", 30,
                 "the job to start", proc, log)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)  # also when the wait failed: leave no worker behind
    assert proc.wait(timeout=30) == 0, _tail(log)
    row = queue.get(job_id, app=app)
    assert row["status"] == expected, (row, _tail(log))
    if expected == "completed":
        assert len(effect_rows(app, "slow")) == 1
    else:
        assert row["attempts"] == 0, "a cut-off job does not use an attempt"
        assert "cut off by worker shutdown" in row["process_logs"]
        assert effect_rows(app, "slow") == []
        assert "cut off, back to pending" in log.read_text()
        # It exits once that outcome is written, not after one more idle wait of its
        # loop (1 s: it took --shutdown-timeout + ~1.2 s).
        finish, stopped = (_logged_at(log, needle) for needle in (
            f"job {job_id} finish", "stopped:"))
        assert 0 <= stopped - finish < 0.5, (finish, stopped, _tail(log))


def _logged_at(log, needle: str) -> float:
    """Seconds (since the epoch, local time) of the first line of `log` holding `needle`."""
    from datetime import datetime

    line = next(line for line in log.read_text().splitlines() if needle in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_sigterm_stops_a_worker_whose_database_is_down_at_once(backend, namespace, tmp_path):
    # Its loop waits for the database to claim (3 s, then 6, 12 ...): a stopping worker
    # claims nothing, so that wait ends at SIGTERM (it took ~15 s, the loop's join).
    from test_health_probes import closed_port

    log = tmp_path / "worker.log"
    env = cli_env(f"mysql+pymysql://root@127.0.0.1:{closed_port()}/test", namespace,
                  broker_url=REDIS, CRONJOBS_LOG_LEVEL="INFO")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--slots", "2"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: log.read_text().count("database unavailable while writing outcomes "
                                               "and claiming jobs") >= 2, 30,
                 "the loop's second wait for the database", proc, log)
    finally:
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, _tail(log)
    assert time.monotonic() - started < 5, _tail(log)
    assert "still running end with the process" not in log.read_text()


@MODES
def test_max_jobs_recycles_with_exit_0(make_app, db_url, namespace, tmp_path, isolation):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_LOG_LEVEL="INFO",
                  CRONJOBS_SWEEP_AFTER_SECONDS="1", CRONJOBS_SWEEP_INTERVAL_SECONDS="1")
    ids = [queue.dispatch(RECORD, {"tag": i}, app=app) for i in range(30)]
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--queues",
                                 "default", "--threads", "1", "--max-jobs", "10",
                                 "--isolation", isolation], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        assert proc.wait(timeout=60) == 0, _tail(log)
    text = log.read_text()
    assert text.count("recycling: max-jobs 10 reached") == 1, text
    done = [r for r in ids if queue.get(r, ["status"], app=app)["status"] == "completed"]
    assert len(done) == 10
    with open(log, "ab") as out:  # the next worker (supervisor's job) takes the rest
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--queues",
                                 "default", "--threads", "2", "--max-jobs", "100"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(all_completed(app, 30), 60, "the other 20 jobs", proc, log)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0


def test_heartbeats_and_workers_command(make_app, db_url, namespace, tmp_path):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    env = cli_env(db_url, namespace, broker_url=REDIS)
    before = run_cli(["workers"], env)
    assert before.returncode == 1
    assert "queue 'default' has no live worker" in before.stdout
    with worker(db_url, namespace, log, threads=2, CRONJOBS_LOG_DIR=str(tmp_path / "logs"),
                CRONJOBS_LOG_LEVEL="INFO") as proc:
        queue.dispatch(RECORD, {}, app=app)
        wait_for(all_completed(app, 1), 30, "one job", proc, log)
        seen = wait_for(lambda: json.loads(run_cli(["workers", "--json"], env).stdout)["live"],
                        30, "a heartbeat", proc, log)
        assert seen[0]["id"].endswith(f":{proc.pid}") and seen[0]["queues"] == "default"
        listing = run_cli(["workers"], env)
        assert f":{proc.pid}" in listing.stdout and "live" in listing.stdout
        assert "queue 'maintenance' has no live worker" in listing.stdout
        assert "queue 'default'" not in listing.stdout
    after = json.loads(run_cli(["workers", "--json"], env).stdout)
    assert after["live"] == [] and after["dead"] == [], "a clean stop removes the heartbeat"
    files = list((tmp_path / "logs").glob("workers-*.log"))
    assert len(files) == 1 and files[0].name == f"workers-{datetime.now(UTC):%Y-%m-%d}.log"
    assert "job 1 finish type=test.record.execute status=completed" in files[0].read_text()


class FreezingProxy:
    """A TCP proxy to `target` that can freeze: from `freeze()` on it forwards nothing in
    either direction and accepts connections it never answers — a database server that
    hangs (stopped, or a network that drops packets) while its port stays open."""

    def __init__(self, target: tuple[str, int]) -> None:
        import threading

        self.target, self.frozen = target, threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.frozen.set()

    def close(self) -> None:
        self.listener.close()
        for sock in self._held:
            sock.close()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._held.append(client)
            if self.frozen.is_set():
                continue
            upstream = socket.create_connection(self.target)
            self._held.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data or self.frozen.is_set():
                return  # frozen: what came is dropped, and nothing more is read
            try:
                sink.sendall(data)
            except OSError:
                return


def test_sigterm_stops_a_worker_whose_database_hangs(make_app, db_url, namespace, tmp_path):
    # A server that accepts connections and never answers kept a stopping worker in the
    # removal of its heartbeat for ever (no read timeout reaches every driver): it waits
    # 5 s for it now, logs that it could not, and exits.
    app = make_app(broker_url=REDIS)
    proxy = FreezingProxy(("127.0.0.1", 3306))
    url = db_url.replace("127.0.0.1:3306", f"127.0.0.1:{proxy.port}")
    log = tmp_path / "worker.log"
    env = cli_env(url, namespace, broker_url=REDIS, CRONJOBS_LOG_LEVEL="INFO")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--slots", "2"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        job_id = queue.dispatch(RECORD, {"tag": "before"}, app=app)
        wait_for(lambda: queue.get(job_id, ["status"], app=app)["status"] == "completed", 30,
                 "a job through the proxy", proc, log)
        proxy.freeze()
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, _tail(log)
        assert time.monotonic() - started < 15, _tail(log)
        assert "could not remove the heartbeat (no answer within 5 s)" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.close()
