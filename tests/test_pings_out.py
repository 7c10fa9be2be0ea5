"""Pings out (issue 39 §3): a scheduled run sends `<PING_URL>/start?rid=N` before its
handler runs, `<PING_URL>?rid=N` on success and `<PING_URL>/fail?rid=N` with the error,
from a background sender; a receiver that is down costs the job nothing and is logged
once. In process on SQLite (`tick(now)`, `testing.drain`), and once with a real worker
process on MariaDB + Redis."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import REDIS, cli_env
from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock, utcnow
from cronjobs.job.pings import PingSender, ping_url
from cronjobs.schedule.scheduler import tick
from cronjobs.testing import drain
from test_worker_e2e import _stop, _tail

T0 = datetime(2026, 3, 2, 9, 0)
QUEUE = "pinged"  # drained alone: the built-in tasks' rows of a tick wait elsewhere


class Receiver:
    """A local HTTP ping receiver: every request as `(path, body, time.time())`."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, bytes, float]] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                hits.append((self.path, self.rfile.read(length), time.time()))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                       daemon=True)  # a quick shutdown
        self.thread.start()

    def wait_for(self, count: int, timeout: float = 5.0) -> list[tuple[str, bytes, float]]:
        deadline = time.monotonic() + timeout
        while len(self.hits) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self.hits)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def handler(url: str, *, fails: bool = False, sleep: float = 0.0) -> type:
    class Pinged(CronJobHandler):
        TYPE = "pinged.job.execute"
        FREQUENCY = "minute"
        OVERLAP = "allow"
        PING_URL = url
        MAX_ATTEMPTS = 1
        QUEUE = "pinged"
        started: list[float] = []

        def handle(self, payload, job):
            Pinged.started.append(time.time())
            time.sleep(sleep)
            if fails:
                raise RuntimeError("disk full " + "x" * 3000)
            return True
    return Pinged


pytestmark_sqlite = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytestmark_sqlite
def test_start_before_handler_then_success_and_fail_pings(make_app, receiver):
    app = make_app(clock=FrozenClock(T0))
    ok = handler(receiver.url + "/hc/abc/")
    app.handlers.register(ok.TYPE, ok)
    tick(app=app, now=T0)
    [run] = drain(app, [QUEUE]).reports
    hits = receiver.wait_for(2)
    assert [h[0] for h in hits] == [f"/hc/abc/start?rid={run.id}", f"/hc/abc?rid={run.id}"]
    assert hits[0][2] <= ok.started[0]  # the receiver heard of the start first

    bad = handler(receiver.url + "/hc/bad", fails=True)
    app2 = make_app(clock=FrozenClock(T0 + timedelta(minutes=1)))
    app2.handlers.register(bad.TYPE, bad)
    tick(app=app2, now=T0 + timedelta(minutes=1))
    [failed] = drain(app2, [QUEUE]).reports
    assert failed.status == "failed"
    hits = receiver.wait_for(4)
    assert hits[3][0] == f"/hc/bad/fail?rid={failed.id}"
    assert hits[3][1].startswith(b"RuntimeError: disk full") and len(hits[3][1]) == 1024


@pytestmark_sqlite
def test_manual_and_dispatched_rows_do_not_ping(make_app, receiver):
    app = make_app(clock=FrozenClock(T0))
    cls = handler(receiver.url + "/hc/x")
    app.handlers.register(cls.TYPE, cls)
    queue.dispatch(cls.TYPE, {"slot": "x"}, idempotency_key="cronjobs:pinged-job:manual:1")
    queue.dispatch(cls.TYPE, {})
    assert len(drain(app, [QUEUE]).reports) == 2
    time.sleep(0.2)
    assert receiver.hits == []


@pytestmark_sqlite
def test_ping_url_from_settings_and_template(make_app, receiver):
    app = make_app(ping_url_template="https://hc-ping.com/KEY/{task}",
                   tasks={"other": {"ping_url": "https://example.org/p/"}})
    assert ping_url(app, None, "db-backup") == "https://hc-ping.com/KEY/db-backup"
    assert ping_url(app, handler("https://a.example/h"), "other") == "https://example.org/p"
    plain = make_app()
    assert ping_url(plain, None, "db-backup") is None


@pytestmark_sqlite
def test_receiver_down_costs_nothing_and_is_logged_once(make_app, caplog):
    port = closed_port()
    app = make_app(clock=FrozenClock(T0))
    cls = handler(f"http://127.0.0.1:{port}/hc", sleep=0.2)
    app.handlers.register(cls.TYPE, cls)
    caplog.set_level(logging.WARNING, logger="cronjobs.pings")
    for minute in range(3):
        tick(app=app, now=T0 + timedelta(minutes=minute))
    started = time.monotonic()
    runs = drain(app, [QUEUE]).reports  # one executor: one sender, as in a worker
    wall = time.monotonic() - started
    assert len(runs) == 3
    deadline = time.monotonic() + 5  # the first ping's tries end within 0.75 s
    while "does not answer" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the other pings: one try each, no second line
    assert all(195 <= run.duration_ms < 300 for run in runs)
    # The runs' own time and the drain's: pings sent in the runs (3 tries, 0.75 s of
    # back-off each) would add 2 s and more.
    assert wall < 3 * 0.2 + 0.6
    down = [r for r in caplog.records if "does not answer" in r.getMessage()]
    assert len(down) == 1 and f"127.0.0.1:{port}" in down[0].getMessage()


def test_sender_drops_when_full_and_logs_recovery(caplog):
    calls: list[str] = []
    answer = {"ok": False}
    gate = threading.Event()

    def opener(request, timeout):
        gate.wait(5)
        calls.append(request.full_url)
        if not answer["ok"]:
            raise OSError("refused")

    sender = PingSender(1.0, retries=2, backoff_seconds=0.01, queue_size=2, opener=opener)
    caplog.set_level(logging.WARNING, logger="cronjobs.pings")
    sent = [sender.send(f"http://r/{n}") for n in range(5)]
    assert sent.count(False) >= 2 and sender.dropped == sent.count(False)
    gate.set()
    assert sender.flush(5)
    answer["ok"] = True
    sender.send("http://r/back")
    assert sender.flush(5)
    sender.close()
    lines = [r.getMessage() for r in caplog.records]
    assert sum(line.startswith("pings: r does not answer") for line in lines) == 1
    assert sum(line.startswith("pings: r answers again") for line in lines) == 1
    assert calls.count("http://r/0") == 2  # retried once while it seemed up


HANDLER_FILE = '''
import time
from pathlib import Path
from cronjobs import CronJobHandler

class PingedWorkerJob(CronJobHandler):
    TYPE = "pinged.worker.execute"
    FREQUENCY = "minute"
    PING_URL = "{url}/hc/w"
    QUEUE = "pinged"

    def handle(self, payload, job):
        Path("{marker}").write_text(repr(time.time()))
        time.sleep(0.1)
        return True
'''


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_real_worker_pings_start_before_handler_and_success_within_1s(
        make_app, db_url, namespace, receiver, tmp_path):
    folder = tmp_path / "handlers"
    folder.mkdir()
    marker = tmp_path / "started"
    (folder / "PingedWorkerJob.py").write_text(
        HANDLER_FILE.format(url=receiver.url, marker=marker))
    app = make_app(handler_paths=(str(folder),), broker_url=REDIS)
    log = tmp_path / "worker.log"
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_HANDLER_PATHS=str(folder))
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--slots", "1",
                                 "--queues", QUEUE],
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        now = utcnow()
        tick(app=app, now=now)
        hits = receiver.wait_for(2, timeout=20)
        assert len(hits) == 2, _tail(log)
        row = queue.get(int(hits[0][0].split("rid=")[1]), app=app)
        assert hits[0][0] == f"/hc/w/start?rid={row['id']}"
        assert hits[1][0] == f"/hc/w?rid={row['id']}"
        assert row["status"] == "completed"
        assert hits[0][2] <= float(marker.read_text())  # before the handler ran
        finished = row["finished_at"].replace(tzinfo=UTC).timestamp()
        assert 0 <= hits[1][2] - finished <= 1.0, (hits, row["finished_at"])
    finally:
        _stop(proc)


@pytestmark_sqlite
def test_the_builtin_health_task_pings_from_the_template(make_app, receiver):
    app = make_app(clock=FrozenClock(T0), ping_url_template=receiver.url + "/t/{task}")
    tick(app=app, now=T0)
    health = app.handlers.resolve_handler(app.handlers.tasks()["cronjobs-health"])
    [run] = [r for r in drain(app, [health.QUEUE or "default"]).reports
             if r.type == health.TYPE]
    paths = [h[0] for h in receiver.wait_for(2)]
    assert f"/t/cronjobs-health/start?rid={run.id}" in paths
    assert f"/t/cronjobs-health?rid={run.id}" in paths


@pytestmark_sqlite
def test_an_attempt_that_will_be_retried_pings_only_its_start(make_app, receiver):
    app = make_app(clock=FrozenClock(T0))
    cls = handler(receiver.url + "/hc/r", fails=True)
    cls.MAX_ATTEMPTS = 2
    app.handlers.register(cls.TYPE, cls)
    tick(app=app, now=T0)
    [run] = drain(app, [QUEUE]).reports
    assert run.status == "pending"
    time.sleep(0.3)
    assert [h[0] for h in receiver.hits] == [f"/hc/r/start?rid={run.id}"]


@pytestmark_sqlite
def test_a_scheduled_row_run_by_id_pings_too(make_app, receiver):
    # `cronjobs run ID` and `queue.process(ID)` run a row through `InlineRunner.run_id`.
    app = make_app(clock=FrozenClock(T0))
    cls = handler(receiver.url + "/hc/id")
    app.handlers.register(cls.TYPE, cls)
    [(_, _, job_id)] = [s for s in tick(app=app, now=T0).started if s[0] == "pinged-job"]
    assert queue.process(job_id, app=app)
    assert [h[0] for h in receiver.wait_for(2)] == [f"/hc/id/start?rid={job_id}",
                                                     f"/hc/id?rid={job_id}"]
