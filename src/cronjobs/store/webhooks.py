"""Webhook deliveries (`cronjob_webhook`): one row per (job row, attempt), inserted with
the attempt's outcome, claimed under a lease by a worker's sender, then marked.

A delivery is `pending` until a POST is answered 2xx (`delivered`) or its tries run out
(`failed`). The sender claims due ones (`claim_due`: `FOR UPDATE SKIP LOCKED` on MariaDB
and PostgreSQL; SQLite has one writer) and stamps them with a lease (`locked_until`) and
a token; a mark is fenced by the token, so a sender whose lease ran out and was taken
over writes nothing. Times are naive UTC, bound as parameters.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, and_, func, or_, select, tuple_

from .models import cronjob_queue as q
from .models import cronjob_webhook as w
from .sql import skip_locked

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
_CLAIMED = (w.c.id, w.c.job_id, w.c.attempt, w.c.url, w.c.body, w.c.tries)
_SHOWN = (w.c.id, w.c.attempt, w.c.url, w.c.status, w.c.tries, w.c.next_try_at,
          w.c.last_error, w.c.last_status_code, w.c.created_at, w.c.delivered_at)


def insert_deliveries(conn: Connection, rows: list[dict], now: datetime) -> int:
    """Insert the deliveries `rows` (`job_id`, `attempt`, `url`, `body`) as `pending`, due
    at `now`, in the caller's transaction (the one writing the outcomes). A (row,
    attempt) that has a delivery already (a row retried by an operator runs its attempt
    numbers again) is left out.

    Returns:
        The number of deliveries inserted.
    """
    if not rows:
        return 0
    keys = [(r["job_id"], r["attempt"]) for r in rows]
    taken = {(r[0], r[1]) for r in conn.execute(select(w.c.job_id, w.c.attempt).where(
        w.c.job_id.in_({k[0] for k in keys}), tuple_(w.c.job_id, w.c.attempt).in_(keys)))}
    new = [dict(r, status=PENDING, tries=0, next_try_at=now, created_at=now)
           for r in rows if (r["job_id"], r["attempt"]) not in taken]
    if new:
        conn.execute(w.insert(), new)
    return len(new)


def claim_due(conn: Connection, now: datetime, *, lease_seconds: float, token: str,
              limit: int = 50, max_tries: int | None = None) -> list[dict]:
    """Claim at most `limit` due deliveries (`pending`, `next_try_at` <= `now`, no live
    lease) for sender `token`: each gets `locked_until` = now + `lease_seconds` and one
    more try counted (`tries`), before any POST. With `max_tries`, a due delivery that
    has had its `max_tries` tries already (a sender died before marking its last one) is
    marked `failed` instead, so `tries` never exceeds `max_tries`.

    Returns:
        The claimed deliveries: `id`, `job_id`, `attempt`, `url`, `body`, `tries` (this
        try's number), `callback_url` (its row's, None without one: a URL equal to it came
        from the row, any other from the handler's WEBHOOK_URL).
    """
    due = and_(w.c.status == PENDING, w.c.next_try_at <= now,
               or_(w.c.locked_until.is_(None), w.c.locked_until <= now))
    if max_tries is not None:
        conn.execute(w.update().where(due, w.c.tries >= max_tries).values(
            status=FAILED, locked_until=None,
            last_error=f"{max_tries} tries made, the last one's answer never recorded"))
    stmt = select(w.c.id).where(due).order_by(w.c.next_try_at, w.c.id).limit(limit)
    ids = [r[0] for r in conn.execute(skip_locked(conn, stmt))]
    if not ids:
        return []
    conn.execute(w.update().where(w.c.id.in_(ids), due).values(
        locked_until=now + timedelta(seconds=lease_seconds), lease_token=token,
        tries=w.c.tries + 1))
    got = conn.execute(select(*_CLAIMED, q.c.callback_url).outerjoin(
        q, q.c.id == w.c.job_id).where(w.c.id.in_(ids), w.c.lease_token == token))
    return [dict(r) for r in got.mappings()]


def mark_delivered(conn: Connection, delivery_ids: list[int], token: str, now: datetime,
                   status_code: int) -> int:
    """Mark deliveries `delivery_ids` (answered `status_code`) `delivered` at `now`, those
    sender `token` still holds. Returns how many were marked."""
    if not delivery_ids:
        return 0
    return conn.execute(w.update().where(
        w.c.id.in_(delivery_ids), w.c.lease_token == token, w.c.status == PENDING).values(
        status=DELIVERED, delivered_at=now, locked_until=None, last_status_code=status_code,
        last_error=None)).rowcount


def mark_try_failed(conn: Connection, delivery_id: int, token: str, *, error: str,
                    status_code: int | None, next_try_at: datetime | None) -> bool:
    """Record a failed try of delivery `delivery_id` (held by sender `token`): due again
    at `next_try_at`, or `failed` for good when it is None. Returns True when marked."""
    values: dict = {"locked_until": None, "last_error": error[:2000],
                    "last_status_code": status_code}
    if next_try_at is None:
        values["status"] = FAILED
    else:
        values["next_try_at"] = next_try_at
    return conn.execute(w.update().where(
        w.c.id == delivery_id, w.c.lease_token == token, w.c.status == PENDING).values(
        **values)).rowcount == 1


def deliveries_of(conn: Connection, job_id: int, limit: int = 50) -> list[dict]:
    """The deliveries of row `job_id`, newest attempt first (at most `limit`), for its
    page: `id`, `attempt`, `url`, `status`, `tries`, `next_try_at`, `last_error`,
    `last_status_code`, `created_at`, `delivered_at`."""
    stmt = select(*_SHOWN).where(w.c.job_id == job_id).order_by(
        w.c.attempt.desc()).limit(limit)
    return [dict(r) for r in conn.execute(stmt).mappings()]


def delete_deliveries(conn: Connection, job_ids: list[int]) -> int:
    """Delete the deliveries of rows `job_ids` (rows the cleanup deleted). Returns how
    many were deleted."""
    if not job_ids:
        return 0
    return conn.execute(w.delete().where(w.c.job_id.in_(job_ids))).rowcount


def has_pending(conn: Connection) -> bool:
    """Whether any delivery is `pending` (one indexed row read)."""
    return conn.execute(select(w.c.id).where(w.c.status == PENDING).limit(1)).first() is not None


def count_by_status(conn: Connection, job_ids: list[int] | None = None) -> dict[str, int]:
    """How many deliveries have each status (of rows `job_ids`; None: all)."""
    stmt = select(w.c.status, func.count()).group_by(w.c.status)
    if job_ids is not None:
        stmt = stmt.where(w.c.job_id.in_(job_ids))
    return {status: int(n) for status, n in conn.execute(stmt)}
