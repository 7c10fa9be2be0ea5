"""The worker's webhook sender: a thread that claims due deliveries (`store.webhooks`)
under a lease, POSTs each signed body (`job.webhooks.sign`) with a timeout, and marks it
`delivered` (a 2xx answer) or due again after a back-off that doubles (`failed` after
`webhook_max_tries`). HTTP is the standard library's `urllib.request`.

What is promised: one delivery row per (job row, attempt), written in the transaction of
the attempt's outcome, so an outcome never commits without its delivery, nor a delivery
without its outcome. A POST may reach the receiver more than once: a worker killed after
the receiver answered and before the mark commits leaves the delivery `pending`; its
lease runs out and a sender POSTs it again with the same `X-Cronjobs-Delivery` id, which
the receiver uses to drop the repeat.
"""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from .. import store
from ..app import App
from ..job.webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, sign
from ..store.db import run_in_transaction

log = logging.getLogger("cronjobs.worker.webhooks")

MAX_BACKOFF_SECONDS = 3600.0
LEASE_MARGIN_SECONDS = 5.0  # a delivery's lease: twice the POST's timeout and this


@dataclass
class DeliveryReport:
    """What one `deliver_due` turn did: deliveries POSTed, `delivered` (2xx), due again
    later (`retried`), given up (`failed`)."""

    sent: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0


def post(url: str, body: str, headers: dict[str, str], timeout_seconds: float) -> int:
    """POST `body` (JSON) to `url` with `headers`; returns the HTTP status code (an
    error status too). Raises OSError (`urllib.error.URLError`, a timeout) when no answer
    came."""
    request = urllib.request.Request(url, data=body.encode(), method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "cronjobs-webhook", **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout_seconds) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def backoff(tries: int, base_seconds: float) -> float:
    """Seconds before the next try after `tries` failed ones: `base_seconds` doubling,
    at most one hour."""
    return min(MAX_BACKOFF_SECONDS, base_seconds * 2 ** max(0, tries - 1))


class WebhookSender:
    """Sends one App's due webhook deliveries (`deliver_due`), from a thread of its own
    (`start`, `stop`) or called directly (tests, a burst).

    Args:
        app: its engine, clock and `settings.webhooks` (secret, tries, timeout, back-off).
        interval_seconds: how often the thread looks for due deliveries.
        parallel: POSTs in flight at once.
    """

    def __init__(self, app: App, *, interval_seconds: float = 0.5, parallel: int = 16) -> None:
        self.app = app
        self.interval_seconds = interval_seconds
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
        if self._thread.is_alive():
            self._thread.join(timeout_seconds)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        failing = False  # logged once per streak of failed turns (a database outage)
        while not self._stop.wait(self.interval_seconds):
            try:
                while self.deliver_due().sent and not self._stop.is_set():
                    pass  # deliveries were due: look again at once
            except Exception as exc:  # database down: tried again at the next turn
                if not failing:
                    log.warning("webhook deliveries could not be sent (%.300s); trying "
                                "again every %g s", exc, self.interval_seconds)
                failing = True
            else:
                if failing:
                    log.info("webhook deliveries are sent again")
                failing = False

    def deliver_due(self, limit: int = 200) -> DeliveryReport:
        """Claim at most `limit` due deliveries, POST them, mark each. Without a secret
        configured, nothing is claimed and one warning is logged (once per sender).

        Returns:
            The `DeliveryReport` of this turn.
        """
        config = self.app.settings.webhooks
        if not config.secret:
            if not self._warned:
                log.warning("webhook deliveries are not sent: no webhook secret is set "
                            "(CRONJOBS_WEBHOOK_SECRET)")
                self._warned = True
            return DeliveryReport()
        lease = 2 * config.timeout_seconds + LEASE_MARGIN_SECONDS
        claimed = run_in_transaction(self.app.engine, lambda conn: store.webhooks.claim_due(
            conn, self.app.clock.now(), lease_seconds=lease, token=self.token, limit=limit))
        answers = list(self._pool.map(lambda d: self._try(d, config), claimed))
        report = DeliveryReport(sent=len(claimed))
        run_in_transaction(self.app.engine,
                           lambda conn: self._mark(conn, claimed, answers, config, report))
        return report

    def _try(self, delivery: dict, config) -> tuple[int | None, str | None]:
        headers = {SIGNATURE_HEADER: sign(config.secret, delivery["body"]),
                   DELIVERY_HEADER: f"{delivery['job_id']}.{delivery['attempt']}"}
        try:
            code = post(delivery["url"], delivery["body"], headers, config.timeout_seconds)
        except (OSError, ValueError) as exc:
            return None, f"{type(exc).__name__}: {exc}"
        return code, None if 200 <= code < 300 else f"HTTP {code}"

    def _mark(self, conn, claimed: list[dict], answers: list, config,
              report: DeliveryReport) -> None:
        report.delivered = report.retried = report.failed = 0
        now = self.app.clock.now()
        delivered: dict[int, list[int]] = {}  # status code -> ids
        for delivery, (code, error) in zip(claimed, answers, strict=True):
            if error is None:
                delivered.setdefault(code, []).append(delivery["id"])
                continue
            last = delivery["tries"] >= config.max_tries
            due = None if last else now + timedelta(
                seconds=backoff(delivery["tries"], config.backoff_seconds))
            if store.webhooks.mark_try_failed(conn, delivery["id"], self.token, error=error,
                                              status_code=code, next_try_at=due):
                if last:
                    report.failed += 1
                else:
                    report.retried += 1
        for code, ids in delivered.items():
            report.delivered += store.webhooks.mark_delivered(conn, ids, self.token, now, code)
