"""The worker's webhook sender: a thread that claims due deliveries (`store.webhooks`)
under a lease, POSTs each signed body (`job.webhooks.sign`) within an overall deadline,
and marks it `delivered` (a 2xx answer) or due again after a back-off that doubles
(`failed` after `webhook_max_tries`). HTTP is the standard library's `http.client` on a
socket this module connects, redirects never followed.

What is promised: one delivery row per (job row, attempt), written in the transaction of
the attempt's outcome, so an outcome never commits without its delivery, nor a delivery
without its outcome. A POST may reach the receiver more than once: a worker killed after
the receiver answered and before the mark commits leaves the delivery `pending`; its
lease runs out and a sender POSTs it again with the same `X-Cronjobs-Delivery` id, which
the receiver uses to drop the repeat. A POST ends by its deadline (`timeout_seconds`,
the socket closed then), well inside the lease, so two senders never POST one delivery
at once. A row's `callback_url` is resolved once, each address checked (no private one
unless `webhook_allow_private`), and the socket connects to the checked address: a name
that resolves differently a moment later (DNS rebinding) is never asked again.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from .. import store
from ..app import App
from ..config.urls import is_private_address
from ..job.webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, deliveries_added, sign
from ..store.db import run_in_transaction

log = logging.getLogger("cronjobs.worker.webhooks")

MAX_BACKOFF_SECONDS = 3600.0
LEASE_MARGIN_SECONDS = 5.0  # a delivery's lease: twice the POST's deadline and this


class RefusedAddress(ValueError):
    """A row's `callback_url` resolves to an address webhooks may not reach (loopback,
    private, link-local, reserved) while `webhook_allow_private` is off: never retried."""


@dataclass
class DeliveryReport:
    """What one `deliver_due` turn did: deliveries POSTed, `delivered` (2xx), due again
    later (`retried`), given up (`failed`)."""

    sent: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    next_due: datetime | None = None  # the soonest try this turn put off (naive UTC)


def resolve(host: str, port: int, *, allow_private: bool) -> str:
    """The address to connect to for `host`:`port`: the first one DNS gives.

    Raises:
        RefusedAddress: `allow_private` is False and any address of `host` is private
            (`config.urls.is_private_address`), naming the host and the address.
        OSError: the name does not resolve.
    """
    found = [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    if not allow_private:
        for address in found:
            if is_private_address(str(address)):
                raise RefusedAddress(
                    f"{host} resolves to {address}, a loopback, private, link-local or "
                    f"reserved address: not sent (CRONJOBS_WEBHOOK_ALLOW_PRIVATE=true allows it)")
    return str(found[0])


def post(url: str, body: str, headers: dict[str, str], timeout_seconds: float, *,
         allow_private: bool = True) -> tuple[int, str | None]:
    """POST `body` (JSON) to `url` with `headers`, all of it (connect, TLS, send, answer
    headers) within `timeout_seconds` (the socket is closed at the deadline, however
    slowly the receiver trickles); redirects are not followed.

    Returns:
        The HTTP status code (any) and the answer's `Location` header (None without one).

    Raises:
        RefusedAddress: see `resolve` (`allow_private` False: a row's `callback_url`).
        TimeoutError: no complete answer by the deadline.
        OSError, http.client.HTTPException, ValueError: no answer that could be read.
    """
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host, port = parts.hostname or "", parts.port or (443 if https else 80)
    sock = socket.create_connection((resolve(host, port, allow_private=allow_private), port),
                                    timeout=timeout_seconds)
    conn = (http.client.HTTPSConnection(host, port) if https
            else http.client.HTTPConnection(host, port))
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        try:
            (conn.sock or sock).shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed already

    timer = threading.Timer(timeout_seconds, cut)
    timer.start()
    try:
        conn.sock = (ssl.create_default_context().wrap_socket(sock, server_hostname=host)
                     if https else sock)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", path, body=body.encode(), headers={
            "Content-Type": "application/json", "User-Agent": "cronjobs-webhook", **headers})
        answer = conn.getresponse()
        if expired.is_set():  # the cut socket ended the headers: not an answer
            raise TimeoutError
        return int(answer.status), answer.getheader("Location")
    except Exception:
        if expired.is_set():
            raise TimeoutError(f"no complete answer within {timeout_seconds:g} s") from None
        raise
    finally:
        timer.cancel()
        conn.close()
        sock.close()


def backoff(tries: int, base_seconds: float) -> float:
    """Seconds before the next try after `tries` failed ones: `base_seconds` doubling,
    at most one hour."""
    return min(MAX_BACKOFF_SECONDS, base_seconds * 2 ** max(0, tries - 1))


IDLE_SECONDS = 5.0  # a sender's look when nothing was added here nor is due sooner


class WebhookSender:
    """Sends one App's due webhook deliveries (`deliver_due`), from a thread of its own
    (`start`, `stop`) or called directly (tests, a burst).

    Args:
        app: its engine, clock and `settings.webhooks` (secret, tries, timeout, back-off).
        interval_seconds: the thread's next look after a turn that sent something or
            after this process added deliveries (`deliveries_added`: the outcome's
            transaction may not have committed when it wakes).
        idle_seconds: its next look otherwise (deliveries added by other processes, and
            tries put off: sooner when one it put off is due sooner).
        parallel: POSTs in flight at once.
    """

    def __init__(self, app: App, *, interval_seconds: float = 0.5,
                 idle_seconds: float = IDLE_SECONDS, parallel: int = 16) -> None:
        self.app = app
        self.interval_seconds = interval_seconds
        self.idle_seconds = idle_seconds
        self._woke = False  # this process added deliveries since the sender started
        self._looked = False  # the database was asked once whether deliveries wait
        self.parallel = parallel
        self.token = uuid.uuid4().hex
        self._pool = ThreadPoolExecutor(parallel, thread_name_prefix="cronjobs-webhook")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cronjobs-webhooks", daemon=True)
        self._warned = False

    def start(self) -> None:
        """Start the sender's thread."""
        self._thread.start()

    def stop(self, timeout_seconds: float = 5) -> None:
        """Stop the thread (waits up to `timeout_seconds` for a turn in progress)."""
        self._stop.set()
        deliveries_added.set()  # wakes the thread (and any other sender: it looks again)
        if self._thread.is_alive():
            self._thread.join(timeout_seconds)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        failing = False  # logged once per streak of failed turns (a database outage)
        wait = self.interval_seconds  # a first look soon: deliveries left from before
        while True:
            woke = deliveries_added.wait(wait)
            deliveries_added.clear()
            if self._stop.is_set():
                return
            self._woke = self._woke or woke
            try:
                report = self._drain()
            except Exception as exc:  # database down: tried again at the next turn
                if not failing:
                    log.warning("webhook deliveries could not be sent (%.300s); trying "
                                "again every %g s", exc, self.interval_seconds)
                failing, wait = True, self.interval_seconds
                continue
            if failing:
                log.info("webhook deliveries are sent again")
            failing, wait = False, self._next_wait(report, woke)

    def _drain(self) -> DeliveryReport:
        """Turns until one sends nothing; what they put off soonest."""
        total = DeliveryReport()
        while not self._stop.is_set():
            report = self.deliver_due()
            total.sent += report.sent
            if report.next_due is not None:
                total.next_due = min(filter(None, (total.next_due, report.next_due)))
            if not report.sent:
                break
        return total

    def _next_wait(self, report: DeliveryReport, woke: bool) -> float:
        """Seconds to the next look: soon after sending or a wake, else `idle_seconds`
        (or less, when a try this sender put off is due sooner)."""
        if report.sent or woke:
            return self.interval_seconds
        if report.next_due is None:
            return self.idle_seconds
        due_in = (report.next_due - self.app.clock.now()).total_seconds()
        return min(self.idle_seconds, max(self.interval_seconds, due_in))

    def deliver_due(self, limit: int = 200) -> DeliveryReport:
        """Claim at most `limit` due deliveries, POST them, mark each. Without a secret
        configured, nothing is claimed and one warning is logged (once per sender).

        Returns:
            The `DeliveryReport` of this turn.
        """
        config = self.app.settings.webhooks
        if not config.secret:
            if not self._warned and self._has_work():
                log.warning("webhook deliveries are not sent: no webhook secret is set "
                            "(CRONJOBS_WEBHOOK_SECRET)")
                self._warned = True
            return DeliveryReport()
        lease = 2 * config.timeout_seconds + LEASE_MARGIN_SECONDS
        limit = min(limit, self.parallel)  # one round of POSTs: all end inside the lease
        claimed = run_in_transaction(self.app.engine, lambda conn: store.webhooks.claim_due(
            conn, self.app.clock.now(), lease_seconds=lease, token=self.token, limit=limit,
            max_tries=config.max_tries))
        answers = list(self._pool.map(lambda d: self._try(d, config), claimed))
        report = DeliveryReport(sent=len(claimed))
        run_in_transaction(self.app.engine,
                           lambda conn: self._mark(conn, claimed, answers, config, report))
        return report

    def _has_work(self) -> bool:
        """Whether this process has webhooks to send: a handler with a WEBHOOK_URL, it
        added deliveries, or (asked of the database once) a pending delivery waits."""
        if self._woke or any(getattr(cls, "WEBHOOK_URL", None)
                             for cls in self.app.handlers.registered_handlers().values()):
            return True
        if self._looked:
            return False
        self._looked = True
        with self.app.engine.connect() as conn:
            return store.webhooks.has_pending(conn)

    def _try(self, delivery: dict, config) -> tuple[int | None, str | None, bool]:
        """POST one delivery: (status code or None, error or None, whether to give up
        now). Every exception ends here: one delivery's failure never touches another."""
        try:
            headers = {SIGNATURE_HEADER: sign(config.secret, delivery["body"]),
                       DELIVERY_HEADER: f"{delivery['job_id']}.{delivery['attempt']}"}
            checked = config.allow_private or delivery.get("callback_url") != delivery["url"]
            code, location = post(delivery["url"], delivery["body"], headers,
                                  config.timeout_seconds, allow_private=checked)
        except RefusedAddress as exc:
            return None, str(exc), True
        except Exception as exc:  # any failure is this delivery's alone
            return None, f"{type(exc).__name__}: {exc}"[:500], False
        if 300 <= code < 400:
            return code, f"HTTP {code}: redirect not followed: Location {location}", False
        return code, None if 200 <= code < 300 else f"HTTP {code}", False

    def _mark(self, conn, claimed: list[dict], answers: list, config,
              report: DeliveryReport) -> None:
        report.delivered = report.retried = report.failed = 0
        now = self.app.clock.now()
        delivered: dict[int, list[int]] = {}  # status code -> ids
        for delivery, (code, error, give_up) in zip(claimed, answers, strict=True):
            if error is None:
                delivered.setdefault(code, []).append(delivery["id"])
                continue
            last = give_up or delivery["tries"] >= config.max_tries
            due = None if last else now + timedelta(
                seconds=backoff(delivery["tries"], config.backoff_seconds))
            if store.webhooks.mark_try_failed(conn, delivery["id"], self.token, error=error,
                                              status_code=code, next_try_at=due):
                if last:
                    report.failed += 1
                else:
                    report.retried += 1
                    report.next_due = min(filter(None, (report.next_due, due)))
        for code, ids in delivered.items():
            report.delivered += store.webhooks.mark_delivered(conn, ids, self.token, now, code)
