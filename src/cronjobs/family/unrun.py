"""Webhooks of rows that end without a run: cancelled (by an operator, a bulk cancel, a
family's cancel, or because a dependency failed) or `expired` before they started.

Every path that ends such rows calls `insert_deliveries` in its own transaction, after
the status change, so no such end commits without its delivery. It sits here, the lowest
package that holds the App, so the operator's actions, the expiry, the worker's sweep and
the family code (dependency cancels) may all import it. The delivery's attempt is the
row's `attempts + 1` (the attempt that did not run: unique per row and attempt, it never
collides with the delivery of an attempt that ran). The body is the one a finished
attempt sends (`cronjobs.job.webhooks.body_of`), with `result` null and `will_retry`
false.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime

from sqlalchemy import Connection

from ..app import App
from ..status import Status
from ..store import webhooks as store_webhooks
from ..store.jobs import get_job

__all__ = ["UNRUN_STATUSES", "WEBHOOK_COLUMNS", "deliveries_added", "insert_deliveries",
           "unrun_body", "webhook_body"]

# Set when this process inserts deliveries (here, or `OutcomeWriter.write` in the
# outcome's transaction): the worker's sender wakes on it rather than looking often.
deliveries_added = threading.Event()
UNRUN_STATUSES = (Status.CANCELLED, Status.EXPIRED)
# What a row's dict must carry for its delivery (the callers' reads select them).
WEBHOOK_COLUMNS = ("id", "type", "callback_url", "attempts", "max_attempts", "error",
                   "outcome_reason")


def webhook_body(job_id: int, job_type: str, status: str, attempt: int,
                 max_attempts: int | None, *, result: object, error: str | None,
                 reason: object, now: datetime) -> str:
    """The JSON body of a webhook (compact, keys sorted): row `job_id` of `job_type`, its
    `attempt` ended `status` at `now` (naive UTC; `finished_at` in ISO 8601 with `Z`),
    `will_retry` when that status is `pending`, the delivery id `<id>.<attempt>`."""
    return json.dumps({
        "id": job_id, "type": job_type, "status": str(status), "attempt": attempt,
        "max_attempts": max_attempts, "will_retry": status == Status.PENDING,
        "result": result, "error": error, "reason": None if reason is None else str(reason),
        "finished_at": now.isoformat(timespec="seconds") + "Z",
        "delivery": f"{job_id}.{attempt}",
    }, default=str, separators=(",", ":"), sort_keys=True)


def unrun_body(row: dict, status: str, now: datetime) -> str:
    """The JSON body of the webhook of `row` (a dict with `WEBHOOK_COLUMNS`) that ended
    `status` (`cancelled` or `expired`) at `now` (naive UTC) without running: attempt
    `attempts + 1`, `result` null, `will_retry` false, `error` and `reason` as stored."""
    return webhook_body(row["id"], row["type"], status, int(row["attempts"] or 0) + 1,
                        row["max_attempts"], result=None, error=row.get("error"),
                        reason=row.get("outcome_reason"), now=now)


def insert_deliveries(conn: Connection, app: App, rows: list[dict], now: datetime) -> int:
    """Insert, in the caller's transaction (the one that ended `rows`), one delivery for
    each row that ended `cancelled` or `expired` without running and has a webhook URL:
    its `callback_url`, else its handler's `WEBHOOK_URL` (resolved once per type; a row
    never claimed, its `max_attempts` unset, says its handler's MAX_ATTEMPTS). Rows of
    another status (`failed` by recover-stale, `pending`) are left out.

    No statement at all when no row has a URL (the rows carry their columns). A row
    without its `WEBHOOK_COLUMNS` (a caller that did not read them) is read here.

    Args:
        conn: the transaction that ended the rows.
        app: resolves the handlers' `WEBHOOK_URL`.
        rows: dicts with `id`, `status` (default `cancelled`) and `WEBHOOK_COLUMNS`.
        now: the end's time (naive UTC), the body's `finished_at`.

    Returns:
        The number of deliveries inserted (`deliveries_added` is set when any was; a
        delivery that row and attempt has already is left out).
    """
    classes: dict[str, type | None] = {}
    new = []
    for row in rows:
        status = row.get("status", Status.CANCELLED)
        if status not in UNRUN_STATUSES:
            continue
        if any(c not in row for c in WEBHOOK_COLUMNS):
            row = {**row, **(get_job(conn, int(row["id"]), list(WEBHOOK_COLUMNS)) or {})}
            if "type" not in row:
                continue
        cls = _handler(app, row["type"], classes)
        url = row["callback_url"] or getattr(cls, "WEBHOOK_URL", None)
        if url:
            if row["max_attempts"] is None and cls is not None:  # set at its first claim
                row = {**row, "max_attempts": cls.MAX_ATTEMPTS}
            new.append({"job_id": row["id"], "attempt": int(row["attempts"] or 0) + 1,
                        "url": url, "body": unrun_body(row, status, now)})
    added = store_webhooks.insert_deliveries(conn, new, now)
    if added:
        deliveries_added.set()
    return added


def _handler(app: App, job_type: str, classes: dict[str, type | None]) -> type | None:
    """`job_type`'s handler class (None: none here), resolved once per type."""
    if job_type not in classes:
        classes[job_type] = app.resolve(job_type)
    return classes[job_type]
