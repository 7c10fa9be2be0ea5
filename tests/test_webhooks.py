"""Signed webhooks: a delivery per (row, attempt) written with the outcome, POSTed signed
by a worker's sender, retried with back-off, shown on the job page; a real receiver (a
threaded http.server), real databases and a real worker process."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import sqlalchemy as sa

from conftest import REDIS, ROOT, SAMPLE_HANDLERS, cli_env
from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.errors import HandlerError, InvalidJob
from cronjobs.handler import CronJobHandler
from cronjobs.job.webhooks import sign, verify
from cronjobs.store.models import cronjob_queue, cronjob_webhook
from cronjobs.testing import drain
from cronjobs.worker.webhooks import WebhookSender
from dashboard_helpers import BEARER, TOKEN, web_client
from test_faults import THREAD_HANDLERS

SECRET = "test-webhook-secret-0123456789"
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


class Receiver:
    """A threaded HTTP server that records every POST (headers, body) and answers with
    the next code of `codes` (then 200)."""

    def __init__(self, codes: list[int] | None = None) -> None:
        self.posts: list[tuple[dict, bytes]] = []
        self.codes = list(codes or [])
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.posts.append((dict(self.headers), body))
                    code = outer.codes.pop(0) if outer.codes else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the sender's POSTs in flight, and more

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def ids(self) -> list[str]:
        with self.lock:
            return [h["X-Cronjobs-Delivery"] for h, _ in self.posts]


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def factory(codes: list[int] | None = None) -> Receiver:
        made.append(Receiver(codes))
        return made[-1]

    yield factory
    for r in made:
        r.close()


def deliveries(app) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(cronjob_webhook).order_by(cronjob_webhook.c.id)).mappings()]


def test_signature_scheme_and_its_verification():
    """The documented scheme: HMAC-SHA256 of "<t>.<body>", checked in constant time and
    against replay (a timestamp more than 5 minutes away)."""
    body = '{"id":1,"status":"completed"}'
    header = sign(SECRET, body, 1_700_000_000)
    t, v1 = (part.split("=", 1)[1] for part in header.split(","))
    expected = hmac.new(SECRET.encode(), f"{t}.{body}".encode(), hashlib.sha256).hexdigest()
    assert t == "1700000000" and v1 == expected
    assert verify(SECRET, header, body, now=1_700_000_100)
    assert verify(SECRET, header, body.encode(), now=1_700_000_100)
    assert not verify(SECRET, header, body + " ", now=1_700_000_100)  # tampered body
    assert not verify("another-secret-0123456", header, body, now=1_700_000_100)
    assert not verify(SECRET, header, body, now=1_700_000_000 + 301)  # replayed later
    assert not verify(SECRET, "t=abc,v1=00", body) and not verify(SECRET, "", body)


def test_the_verification_snippet_of_the_docs_accepts_our_signature():
    page = (ROOT / "docs" / "webhooks.md").read_text(encoding="utf-8")
    snippet = page.split("## 4.")[1].split("```python")[1].split("```")[0]
    scope: dict = {}
    exec(snippet, scope)
    body = b'{"id":7,"status":"failed"}'
    assert scope["verify"](SECRET, sign(SECRET, body.decode()), body)
    assert not scope["verify"](SECRET, sign(SECRET, body.decode()), body + b" ")
    assert not scope["verify"](SECRET, sign(SECRET, body.decode(), 1_000), body)


@SQLITE
def test_a_bad_callback_url_is_refused_and_nothing_is_written(make_app):
    app = make_app()
    for bad in ("ftp://example.com/x", "not a url", "https://", "http://a/" + "x" * 2100,
                "http://exa mple.com/", 42):
        with pytest.raises(ValueError) as info:
            queue.dispatch("test.record.execute", {}, callback_url=bad)
        assert isinstance(info.value, InvalidJob)
        assert "callback_url" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match="callback_url"):
        queue.dispatch_many([{"type": "test.record.execute", "callback_url": "https://ok.test/"},
                             {"type": "test.record.execute", "callback_url": "gopher://x"}])
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)).scalar() == 0

    class BadHook(CronJobHandler):
        TYPE = "test.badhook.execute"
        WEBHOOK_URL = "mailto:ops@example.com"

        def handle(self, payload, job):
            return True

    with pytest.raises(HandlerError, match="BadHook.*WEBHOOK_URL 'mailto:ops@example.com'"):
        app.handlers.register(BadHook.TYPE, BadHook)


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_500_then_200_is_retried_and_delivered_once_and_the_row_url_wins(make_app, receiver):
    """A 500 schedules the next try after the back-off (on the injected clock); the 200
    marks it delivered; one delivery row, two POSTs with the same delivery id and valid
    signatures. A row's callback_url wins over its handler's WEBHOOK_URL; each attempt of
    a retried row gets its own delivery, its body saying whether it will retry."""
    clock = FrozenClock(datetime(2027, 3, 1, 12, 0))
    app = make_app(clock=clock, webhook_secret=SECRET, webhook_backoff_seconds=30)
    handler_hook, row_hook = receiver([500]), receiver()

    class Flaky(CronJobHandler):
        TYPE = "test.flaky.execute"
        WEBHOOK_URL = handler_hook.url
        MAX_ATTEMPTS = 2

        def handle(self, payload, job):
            return job.attempts > 1 or payload.get("ok", False)

    app.handlers.register(Flaky.TYPE, Flaky)
    first = queue.dispatch("test.flaky.execute", {"ok": True})
    second = queue.dispatch("test.flaky.execute", {}, callback_url=row_hook.url)
    drain(app)
    sender = WebhookSender(app)
    try:
        report = sender.deliver_due()
        assert (report.sent, report.delivered, report.retried) == (2, 1, 1)
        assert sender.deliver_due().sent == 0  # not due before the back-off
        clock.advance(31)
        clock.set(max(clock.now(), queue.get(second)["scheduled_at"]))
        drain(app)  # the second row's retry: attempt 2 completes
        report = sender.deliver_due()
        assert (report.sent, report.delivered) == (2, 2)
    finally:
        sender.stop()
    rows = {(d["job_id"], d["attempt"]): d for d in deliveries(app)}
    assert set(rows) == {(first, 1), (second, 1), (second, 2)}
    assert rows[(first, 1)]["status"] == "delivered" and rows[(first, 1)]["tries"] == 2
    assert rows[(first, 1)]["url"] == handler_hook.url
    assert handler_hook.ids() == [f"{first}.1", f"{first}.1"]
    assert row_hook.ids() == [f"{second}.1", f"{second}.2"]
    for headers, body in handler_hook.posts + row_hook.posts:
        assert verify(SECRET, headers["X-Cronjobs-Signature"], body)
    bodies = [json.loads(b) for _, b in row_hook.posts]
    assert [(b["status"], b["attempt"], b["will_retry"]) for b in bodies] == [
        ("pending", 1, True), ("completed", 2, False)]


@MARIADB
def test_no_secret_sends_nothing_and_warns_once(make_app, receiver, caplog):
    app = make_app()
    hook = receiver()
    queue.dispatch("test.record.execute", {}, callback_url=hook.url)
    drain(app)
    sender = WebhookSender(app)
    try:
        assert sender.deliver_due().sent == 0 and sender.deliver_due().sent == 0
    finally:
        sender.stop()
    assert [d["status"] for d in deliveries(app)] == ["pending"] and hook.posts == []
    assert sum("no webhook secret" in r.getMessage() for r in caplog.records) == 1


@MARIADB
def test_a_failed_delivery_shows_on_the_job_page(make_app, receiver):
    clock = FrozenClock(datetime(2027, 3, 1, 12, 0))
    app = make_app(clock=clock, webhook_secret=SECRET, webhook_max_tries=2,
                   webhook_backoff_seconds=5, dashboard_token=TOKEN)
    hook = receiver([503, 503])
    job_id = queue.dispatch("test.record.execute", {}, callback_url=hook.url)
    drain(app)
    sender = WebhookSender(app)
    try:
        assert sender.deliver_due().retried == 1
        clock.advance(6)
        assert sender.deliver_due().failed == 1
        clock.advance(3600)
        assert sender.deliver_due().sent == 0  # failed for good
    finally:
        sender.stop()
    page = web_client(app).get(f"/jobs/{job_id}", headers=BEARER).get_data(as_text=True)
    assert 'id="webhooks"' in page and 'class="webhook failed"' in page
    assert "HTTP 503" in page and hook.url in page
    clock.advance(400 * 86400)  # past every retention: the cleanup takes its webhooks too
    queue.cleanup(app=app)
    assert queue.get(job_id) is None and deliveries(app) == []


def _worker(env: dict, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--queues", "default",
                             "--threads", "16"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout} s")
        time.sleep(0.2)


@MARIADB
def test_1000_jobs_give_1000_signed_deliveries_from_a_worker(make_app, receiver, db_url,
                                                             namespace, tmp_path):
    app = make_app(broker_url=REDIS, webhook_secret=SECRET,
                   handler_paths=(SAMPLE_HANDLERS, THREAD_HANDLERS))
    hook = receiver()
    queue.dispatch_many([{"type": "test.threadsleep.execute", "payload": {"seconds": 0},
                          "callback_url": hook.url} for _ in range(1000)])
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_WEBHOOK_SECRET=SECRET,
                  CRONJOBS_HANDLER_PATHS=f"{SAMPLE_HANDLERS}:{THREAD_HANDLERS}")
    with open(tmp_path / "worker.log", "wb") as log:
        proc = _worker(env, log)
        try:
            _wait(lambda: len(hook.posts) >= 1000, 60, "1,000 deliveries")
        finally:
            _stop(proc)
    assert len(hook.posts) == 1000 and len(set(hook.ids())) == 1000
    for headers, body in hook.posts:
        assert verify(SECRET, headers["X-Cronjobs-Signature"], body)
        assert json.loads(body)["status"] == "completed"
    assert {d["status"] for d in deliveries(app)} == {"delivered"}


@MARIADB
def test_kill_9_of_a_worker_mid_run_gives_no_duplicate_delivery(make_app, receiver, db_url,
                                                                namespace, tmp_path):
    """A worker killed with SIGKILL while its jobs run: the killed attempts have no
    outcome and so no delivery; recover-stale puts them back, the next worker runs them
    as attempt 2, each delivered once: one delivery row per (row, attempt) whose outcome
    committed; a POST repeats only for a delivery whose lease ran out."""
    app = make_app(broker_url=REDIS, webhook_secret=SECRET)
    hook = receiver()
    ids = queue.dispatch_many([{"type": "test.sleep.execute", "payload": {"seconds": 0.6},
                                "callback_url": hook.url} for _ in range(40)])
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_WEBHOOK_SECRET=SECRET,
                  CRONJOBS_WEBHOOK_TIMEOUT_SECONDS="1", CRONJOBS_LEASE_GRACE_SECONDS="1",
                  CRONJOBS_SWEEP_INTERVAL_SECONDS="1", CRONJOBS_SWEEP_AFTER_SECONDS="1")

    def running() -> int:
        with app.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue).where(
                cronjob_queue.c.status == "running")).scalar()

    with open(tmp_path / "worker.log", "wb") as log:
        victim = _worker(env, log)
        _wait(lambda: len(hook.posts) >= 8 and running() > 0, 30, "jobs running")
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
        survivor = _worker(env, log)
        try:
            def all_delivered() -> bool:
                queue.recover_stale(0, app=app)
                return len(set(hook.ids())) >= 40 and all(
                    d["status"] == "delivered" for d in deliveries(app))
            _wait(all_delivered, 40, "every row delivered")
        finally:
            _stop(survivor)
    with app.engine.connect() as conn:
        attempts = {r[0]: r[1] for r in conn.execute(
            sa.select(cronjob_queue.c.id, cronjob_queue.c.attempts))}
    rows = deliveries(app)
    assert sorted((d["job_id"], d["attempt"]) for d in rows) == sorted(attempts.items())
    assert any(a == 2 for a in attempts.values())  # some run was killed and ran again
    assert sorted(set(hook.ids())) == sorted(f"{i}.{attempts[i]}" for i in ids)
    # A POST is repeated only for a delivery whose lease ran out (the killed worker POSTed
    # it and died before marking it): tried again, with the same delivery id.
    repeated = len(hook.ids()) - len(set(hook.ids()))
    assert repeated <= sum(d["tries"] - 1 for d in rows)
