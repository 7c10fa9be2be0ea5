"""Signed webhooks: a delivery per (row, attempt) written with the outcome, POSTed signed
by a worker's sender, retried with back-off, shown on the job page; a real receiver (a
threaded http.server), real databases and a real worker process."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
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
from cronjobs.config import Settings
from cronjobs.errors import ConfigError, HandlerError, InvalidCallbackUrl, InvalidJob
from cronjobs.handler import CronJobHandler
from cronjobs.job.webhooks import deliveries_added, sign, verify
from cronjobs.store.models import cronjob_queue, cronjob_webhook
from cronjobs.testing import drain
from cronjobs.worker.webhooks import WebhookSender
from dashboard_helpers import BEARER, TOKEN, web_client
from test_faults import THREAD_HANDLERS

SECRET = "test-webhook-secret-0123456789"
HOOKED = "test.hooked.execute"  # `register_hooked`
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
                if 300 <= code < 400:
                    self.send_header("Location", "/elsewhere")
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


def register_hooked(app, url: str) -> None:
    """Register `test.hooked.execute` (always completes) with `WEBHOOK_URL = url`."""
    class Hooked(CronJobHandler):
        TYPE = HOOKED
        WEBHOOK_URL = url

        def handle(self, payload, job):
            return True

    app.handlers.register(Hooked.TYPE, Hooked)


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
    app = make_app(clock=clock, webhook_secret=SECRET, webhook_backoff_seconds=30,
                   webhook_allow_private=True)
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
    app = make_app(webhook_allow_private=True)
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
                   webhook_backoff_seconds=5, dashboard_token=TOKEN,
                   webhook_allow_private=True)
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
    app = make_app(broker_url=REDIS, webhook_secret=SECRET, webhook_allow_private=True,
                   handler_paths=(SAMPLE_HANDLERS, THREAD_HANDLERS))
    hook = receiver()
    queue.dispatch_many([{"type": "test.threadsleep.execute", "payload": {"seconds": 0},
                          "callback_url": hook.url} for _ in range(1000)])
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_WEBHOOK_SECRET=SECRET,
                  CRONJOBS_WEBHOOK_ALLOW_PRIVATE="true",
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
    app = make_app(broker_url=REDIS, webhook_secret=SECRET, webhook_allow_private=True)
    hook = receiver()
    ids = queue.dispatch_many([{"type": "test.sleep.execute", "payload": {"seconds": 0.6},
                                "callback_url": hook.url} for _ in range(40)])
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_WEBHOOK_SECRET=SECRET,
                  CRONJOBS_WEBHOOK_ALLOW_PRIVATE="true", CRONJOBS_WEBHOOK_TIMEOUT_SECONDS="1",
                  CRONJOBS_LEASE_GRACE_SECONDS="1",
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


def test_verify_is_false_for_a_missing_or_loose_header_in_the_library_and_the_docs():
    page = (ROOT / "docs" / "webhooks.md").read_text(encoding="utf-8")
    scope: dict = {}
    exec(page.split("## 4.")[1].split("```python")[1].split("```")[0], scope)
    body = '{"id":7}'
    header = sign(SECRET, body)
    t, v1 = header.split(",")
    for bad in (None, "", f"{t}, {v1}", f" {header}", f"{v1},{t}", f"{header},x=1",
                f"{t},v1={v1[3:].upper()}", "t=1,v1=zz"):
        assert verify(SECRET, bad, body) is False, bad
        assert scope["verify"](SECRET, bad, body.encode()) is False, bad
    assert verify(SECRET, header, body) and scope["verify"](SECRET, header, body.encode())


def test_an_empty_secret_is_unset_and_a_bad_one_is_not_printed():
    assert Settings.load(environ={"CRONJOBS_WEBHOOK_SECRET": ""}).webhooks.secret is None
    with pytest.raises(ConfigError) as info:
        Settings.load(environ={"CRONJOBS_WEBHOOK_SECRET": "hunter2-short"})
    assert "hunter2" not in str(info.value) and "webhook_secret" in str(info.value)


@SQLITE
def test_private_and_unsafe_callback_urls_are_refused_at_dispatch(make_app, caplog):
    """SSRF: an IP literal of a loopback/private/link-local address or `localhost` is
    refused unless allowed; credentials and non-ASCII are refused (not shown); many rows
    name the bad one; a sender with nothing to send does not warn of the secret."""
    app = make_app()
    for bad in ("http://127.0.0.1:8080/x", "http://169.254.169.254/latest/meta-data",
                "http://localhost/x", "http://[::1]/x", "http://10.1.2.3/", "http://[::ffff:127.0.0.1]/",
                "https://user:s3cret@hooks.example/x", "http://hooks.example/\u00e4",
                # IPv4 in the legacy forms clients accept (inet_aton), a bad IPv6 literal
                "http://127.1/", "http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/",
                "http://0/", "http://0251.0376.0251.0376/", "http://[v1.x]/", "http://1.2.3.999/"):
        with pytest.raises(InvalidCallbackUrl) as info:
            queue.dispatch("test.record.execute", {}, callback_url=bad)
        assert "\n" not in str(info.value) and "s3cret" not in str(info.value), bad
    with pytest.raises(InvalidCallbackUrl, match=r"^jobs\[1\]: callback_url .*169\.254"):
        queue.dispatch_many([{"type": "test.record.execute", "callback_url": "https://ok.test/"},
                             {"type": "test.record.execute", "callback_url": "http://169.254.1.1/"}])
    with pytest.raises(HandlerError, match="WEBHOOK_URL .*user name or password"):
        app.handlers.register("test.cred.execute", type("Cred", (CronJobHandler,), {
            "TYPE": "test.cred.execute", "WEBHOOK_URL": "https://u:p@hooks.example/",
            "handle": lambda self, payload, job: True}))
    sender = WebhookSender(app)
    try:
        assert sender.deliver_due().sent == 0
    finally:
        sender.stop()
    assert not any("no webhook secret" in r.getMessage() for r in caplog.records)
    assert queue.dispatch("test.record.execute", {}, callback_url="http://0x08080808/x") > 0
    assert make_app(webhook_allow_private=True) and queue.dispatch(
        "test.record.execute", {}, callback_url="http://127.0.0.1:9/x") > 0


@SQLITE
def test_send_time_checks_and_one_bad_delivery_never_jams_another(make_app, receiver):
    """A URL whose host resolves to loopback (decimal 127.0.0.1, written by hand: dispatch
    refuses it) fails at send, not POSTed; the handler's WEBHOOK_URL (trusted) is
    delivered; a delivery whose URL breaks http.client fails alone; a 3xx is not
    followed; a delivery whose tries ran out without a recorded answer is failed, its
    tries never above the maximum."""
    app = make_app(webhook_secret=SECRET, webhook_max_tries=2, dashboard_token=TOKEN)
    hook, moved = receiver(), receiver([302])

    register_hooked(app, hook.url)
    port = hook.server.server_address[1]
    trusted = queue.dispatch(HOOKED, {})
    sneaky = queue.dispatch(HOOKED, {}, callback_url="https://hooks.example/s")
    broken = queue.dispatch(HOOKED, {}, callback_url="https://hooks.example/x")
    worn = queue.dispatch(HOOKED, {}, callback_url="https://hooks.example/y")
    redirected = queue.dispatch(HOOKED, {}, callback_url="https://hooks.example/z")
    with app.engine.begin() as conn:  # by hand: dispatch refuses 2130706433 (127.0.0.1)
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == sneaky).values(
            callback_url=f"http://2130706433:{port}/hook"))
    drain(app)
    with app.engine.begin() as conn:  # written before this release's checks, or by hand
        w = cronjob_webhook.c
        conn.execute(cronjob_webhook.update().where(w.job_id == broken).values(
            url=f"http://127.0.0.1:{port}/\u00e4"))
        conn.execute(cronjob_webhook.update().where(w.job_id == worn).values(
            tries=2, url="https://u:s3cret@hooks.example/y"))
        conn.execute(cronjob_webhook.update().where(w.job_id == redirected).values(
            url=moved.url))
    sender = WebhookSender(app)
    try:
        report = sender.deliver_due()
    finally:
        sender.stop()
    rows = {d["job_id"]: d for d in deliveries(app)}
    assert (report.sent, report.delivered, report.retried, report.failed) == (4, 1, 2, 1)
    assert rows[trusted]["status"] == "delivered" and hook.ids() == [f"{trusted}.1"]
    assert rows[sneaky]["status"] == "failed"
    assert "resolves to 127.0.0.1" in rows[sneaky]["last_error"]
    assert rows[broken]["status"] == "pending" and rows[broken]["tries"] == 1
    assert rows[redirected]["status"] == "pending" and rows[redirected]["last_error"] == (
        "HTTP 302: redirect not followed: Location /elsewhere") and len(moved.posts) == 1
    assert rows[worn]["status"] == "failed" and rows[worn]["tries"] == 2
    page = web_client(app).get(f"/jobs/{worn}", headers=BEARER).get_data(as_text=True)
    assert "u:***@hooks.example" in page and "s3cret" not in page


class Trickler:
    """A server that answers every connection with a status line and then one header
    byte every 0.1 s for 5 s: each read is quick, the answer never ends."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    @staticmethod
    def _trickle(conn: socket.socket) -> None:
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            for _ in range(50):
                conn.sendall(b"a")
                time.sleep(0.1)
        except OSError:
            pass
        finally:
            conn.close()


@SQLITE
def test_a_trickling_receiver_is_cut_at_the_deadline_and_no_second_sender_overlaps(make_app):
    app = make_app(webhook_secret=SECRET, webhook_timeout_seconds=0.5, webhook_allow_private=True)
    slow = Trickler()
    queue.dispatch("test.record.execute", {}, callback_url=slow.url)
    drain(app)
    first, second = WebhookSender(app), WebhookSender(app)
    reports: list = []
    try:
        started = time.monotonic()
        thread = threading.Thread(target=lambda: reports.append(first.deliver_due()))
        thread.start()
        time.sleep(0.2)
        assert second.deliver_due().sent == 0  # the first one's lease holds it
        thread.join(5)
        took = time.monotonic() - started
    finally:
        first.stop()
        second.stop()
        slow.sock.close()
    assert reports[0].retried == 1 and took < 1.5 and slow.connections == 1
    [row] = deliveries(app)
    assert row["status"] == "pending" and "no complete answer within 0.5 s" in row["last_error"]


@SQLITE
def test_an_idle_sender_looks_seldom_and_wakes_on_deliveries_added_here(make_app, receiver):
    """With nothing to send, a started sender looks once soon and then every
    `idle_seconds`; an outcome with a webhook written in its process wakes it (the
    delivery is sent within about `interval_seconds` of the write, not `idle_seconds`)."""
    app = make_app(webhook_secret=SECRET, webhook_allow_private=True)
    hook = receiver()
    looks: list[float] = []

    def count(conn, cursor, statement, *args) -> None:
        if "cronjob_webhook" in statement and statement.lstrip().upper().startswith("SELECT"):
            looks.append(time.monotonic())

    sa.event.listen(app.engine, "before_cursor_execute", count)
    sender = WebhookSender(app, interval_seconds=0.2, idle_seconds=30)
    deliveries_added.clear()  # left set by an earlier test of this process (drain, stop)
    sender.start()
    try:
        time.sleep(1.5)
        assert len(looks) == 1, looks  # the first look, then idle: no look every 0.2 s
        job_id = queue.dispatch("test.record.execute", {}, callback_url=hook.url)
        written = time.monotonic()
        drain(app)  # the outcome writer adds the delivery in this process
        _wait(lambda: hook.ids() == [f"{job_id}.1"], 5, "the delivery after the wake")
        assert time.monotonic() - written < 3
    finally:
        sender.stop()
        sa.event.remove(app.engine, "before_cursor_execute", count)


# Rows that end without a run (cancelled, expired): one delivery each, attempt
# `attempts + 1`, written in the transaction that ends the row (`family.unrun`).

class NeverWorks(CronJobHandler):
    TYPE = "test.neverworks.execute"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        raise RuntimeError("boom")


def _delivered(app, hook) -> dict[str, dict]:
    """Send what is due (one sender, one turn) and return the bodies `hook` got, by
    delivery id, each with a valid signature."""
    sender = WebhookSender(app)
    try:
        sender.deliver_due()
    finally:
        sender.stop()
    for headers, body in hook.posts:
        assert verify(SECRET, headers["X-Cronjobs-Signature"], body)
    return {h["X-Cronjobs-Delivery"]: json.loads(b) for h, b in hook.posts}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_operator_and_bulk_cancels_deliver_cancelled_webhooks(make_app, receiver):
    """An operator's cancel of a pending row with a callback_url, and of a row whose
    handler has a WEBHOOK_URL, give one `cancelled` delivery each (attempt 1); a bulk
    cancel of 3 rows gives 3; a row without a webhook gives none."""
    from cronjobs.actions import bulk, operator
    from cronjobs.actions.selection import Selection

    app = make_app(webhook_secret=SECRET, webhook_allow_private=True)
    hook = receiver()

    register_hooked(app, hook.url)
    one = queue.dispatch("test.record.execute", {}, callback_url=hook.url)
    by_type = queue.dispatch(HOOKED, {})
    plain = queue.dispatch("test.record.execute", {})
    three = [queue.dispatch("test.record.execute", {}, callback_url=hook.url)
             for _ in range(3)]
    for job_id in (one, by_type, plain):
        operator.cancel(app, job_id, who="test")
    done = bulk.run(app, bulk.start(app, "cancel", Selection(ids=tuple(three)), who="cli"))
    assert done["status"] == "done"
    assert {(d["job_id"], d["attempt"]) for d in deliveries(app)} == {
        (i, 1) for i in (one, by_type, *three)}  # none for `plain`
    got = _delivered(app, hook)
    assert set(got) == {f"{i}.1" for i in (one, by_type, *three)}
    body = got[f"{one}.1"]
    assert (body["status"], body["attempt"], body["will_retry"], body["result"],
            body["reason"], body["id"]) == ("cancelled", 1, False, None, None, one)
    assert body["max_attempts"] == 3  # never claimed: its handler's MAX_ATTEMPTS
    assert got[f"{by_type}.1"]["type"] == HOOKED
    assert all(d["status"] == "delivered" for d in deliveries(app))


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)
def test_dependency_failed_expired_and_a_retried_row_cancelled_deliver(make_app, receiver):
    """A row cancelled because its dependency failed gets a `cancelled` delivery (reason
    `dependency_failed`); a row expired before it started an `expired` one; a row whose
    attempt 1 failed and was delivered (will_retry), then cancelled, gets attempt 2."""
    from cronjobs.actions import operator

    clock = FrozenClock(datetime(2027, 3, 1, 12, 0))
    app = make_app(clock=clock, webhook_secret=SECRET, webhook_allow_private=True)
    hook = receiver()
    app.handlers.register(NeverWorks.TYPE, NeverWorks)
    failing = queue.dispatch(NeverWorks.TYPE, {})
    dependent = queue.dispatch("test.record.execute", {}, depends_on=[failing],
                               callback_url=hook.url)
    retried = queue.dispatch(NeverWorks.TYPE, {}, max_attempts=3, callback_url=hook.url)
    drain(app)  # the dependency fails (its dependent is cancelled); `retried` fails once
    assert queue.get(dependent)["status"] == "cancelled"
    late = queue.dispatch("test.record.execute", {}, depends_on=[failing],
                          callback_url=hook.url)  # cancelled at dispatch: never run
    assert queue.get(retried)["status"] == "pending"
    expiring = queue.dispatch("test.record.execute", {}, expires_in=60, callback_url=hook.url)
    clock.advance(61)
    drain(app)  # expires `expiring` before it claims (never run)
    assert queue.get(expiring)["status"] == "expired"
    first = _delivered(app, hook)
    assert first[f"{retried}.1"]["will_retry"] is True
    operator.cancel(app, retried, who="test")
    got = _delivered(app, hook)
    assert set(got) == {f"{dependent}.1", f"{late}.1", f"{expiring}.1", f"{retried}.1",
                        f"{retried}.2"}
    assert got[f"{late}.1"]["reason"] == "dependency_failed"
    assert got[f"{late}.1"]["max_attempts"] == got[f"{dependent}.1"]["max_attempts"]
    dep = got[f"{dependent}.1"]
    assert (dep["status"], dep["reason"], dep["will_retry"]) == (
        "cancelled", "dependency_failed", False)
    assert dep["error"] == f"dependency {failing} failed"
    exp = got[f"{expiring}.1"]
    assert (exp["status"], exp["reason"], exp["result"]) == ("expired", "expired", None)
    assert exp["error"].startswith("not started by its deadline")
    again = got[f"{retried}.2"]
    assert (again["status"], again["attempt"], again["will_retry"]) == ("cancelled", 2, False)
    assert "boom" in again["error"]
