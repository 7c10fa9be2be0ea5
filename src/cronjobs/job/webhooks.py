"""Webhooks of finished attempts: which URL a row's outcome goes to, its JSON body, the
delivery rows written with the outcome, and the signature of a POST.

The signature header is `X-Cronjobs-Signature: t=<unix seconds>,v1=<hex>` where `<hex>`
is HMAC-SHA256, keyed with the settings' `webhook_secret`, of `"<t>.<body>"` (the body's
exact bytes). A receiver recomputes it, compares in constant time and refuses a `t` too
far from its clock (replay); `X-Cronjobs-Delivery: <row id>.<attempt>` names the
delivery, the same on every try of it (docs/webhooks.md).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Any

from ..app import App
from ..family import unrun
from ..status import Ended, Status

SIGNATURE_HEADER = "X-Cronjobs-Signature"
DELIVERY_HEADER = "X-Cronjobs-Delivery"
REPLAY_TOLERANCE_SECONDS = 300
# Set when this process inserts deliveries (`OutcomeWriter.write`, in the outcome's
# transaction; `family.unrun` for rows that end without a run): the worker's sender wakes
# on it rather than looking often. One Event, defined where both may use it.
deliveries_added = unrun.deliveries_added
_SIGNATURE = re.compile(r"t=(?P<t>[0-9]{1,12}),v1=(?P<v1>[0-9a-f]{64})")


def url_of(app: App, job: Any, handler_urls: dict[str, str | None] | None = None) -> str | None:
    """The webhook URL of run `job` (a `handler.Job`): the row's `callback_url`, else its
    handler's `WEBHOOK_URL` (the class this process resolves for its type), else None.
    `handler_urls`: a cache of each type's `WEBHOOK_URL` (resolved once per type)."""
    if job.callback_url:
        return job.callback_url
    if handler_urls is None:
        return getattr(app.resolve(job.type), "WEBHOOK_URL", None)
    try:
        return handler_urls[job.type]
    except KeyError:
        url = handler_urls[job.type] = getattr(app.resolve(job.type), "WEBHOOK_URL", None)
        return url


def body_of(job: Any, status: str, outcome: Any, now: Any) -> str:
    """The JSON body of the webhook of run `job` ended with `status` (the row's status
    after the write; `deleted` is sent as `cancelled`), `outcome` (its `result`,
    `error`, `reason`) at `now` (naive UTC)."""
    status = Status.CANCELLED if status == Ended.DELETED else status
    return unrun.webhook_body(job.id, job.type, status, job.attempts, job.max_attempts,
                              result=outcome.result, error=outcome.error,
                              reason=outcome.reason, now=now)


def deliveries(app: App, plans: list, finals: list,
               handler_urls: dict[str, str | None] | None = None) -> list[dict]:
    """The delivery rows of the written `plans` (`finishing.Finish`) with their final
    statuses: one per run whose attempt counted and that has a webhook URL; none for a
    run that lost its row, nor for one that gave its attempt back (a RetryLater, a
    cut-off, a row put back for another worker: the next run has the same number).
    `handler_urls`: the caller's cache of each type's `WEBHOOK_URL` (see `url_of`)."""
    rows = []
    for plan, final in zip(plans, finals, strict=True):
        job = plan.job
        if final == Ended.LOST or plan.values.get("attempts") == job.attempts - 1:
            continue
        url = url_of(app, job, handler_urls)
        if url:
            rows.append({"job_id": job.id, "attempt": job.attempts, "url": url,
                         "body": body_of(job, final, plan.outcome, plan.now)})
    return rows


def sign(secret: str, body: str, timestamp: int | None = None) -> str:
    """The `X-Cronjobs-Signature` value of `body` signed with `secret` at `timestamp`
    (unix seconds; None: now): `t=<timestamp>,v1=<hex HMAC-SHA256 of "<t>.<body>">`."""
    t = int(time.time()) if timestamp is None else int(timestamp)
    digest = hmac.new(secret.encode(), f"{t}.{body}".encode(), hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"


def verify(secret: str, header: str | None, body: str | bytes, *, now: float | None = None,
           tolerance_seconds: float = REPLAY_TOLERANCE_SECONDS) -> bool:
    """True when `header` (an `X-Cronjobs-Signature` value, exactly `t=<digits>,v1=<64
    lower-case hex>`) signs `body` with `secret` and its timestamp is within
    `tolerance_seconds` of `now` (unix seconds; None: now). Never raises for a missing
    (None) or malformed header (spaces, other parts, another order): it is False."""
    match = _SIGNATURE.fullmatch(header) if isinstance(header, str) else None
    if match is None:
        return False
    t = int(match["t"])
    if abs((time.time() if now is None else now) - t) > tolerance_seconds:
        return False
    data = body if isinstance(body, bytes) else body.encode()
    expected = hmac.new(secret.encode(), f"{t}.".encode() + data, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, match["v1"])
