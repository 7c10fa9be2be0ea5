"""Upkeep statements: rescue stale rows, find undelivered rows, prune old rows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import Connection, and_, case, exists, func, or_, select, union
from sqlalchemy import alias as aliased  # Core: the same SQL as the ORM's, without the ORM

from .. import limits
from ..status import Reason, Status
from .jobs import live_in_families
from .models import cronjob_queue as q
from .models import cronjob_slot
from .sql import db_now, due, skip_locked
from .webhooks import delete_deliveries


def rescue_stale(conn: Connection, now: datetime, minutes: float, limit: int = 500,
                 mark: Callable[[str], str] | None = None) -> list[dict]:
    """Take back `running` rows whose lease ran out more than `minutes` ago.

    Lease ages are judged with the database's clock, the clock the leases were written
    with, so the host running this cannot take a live row because its own clock is ahead.
    A row with attempts left goes back to `pending` (due now); one without goes to
    `failed`. Both get a process-log line and the reason `lease_expired`. Rows with a live
    lease are never touched, so a long job on a live worker (which renews its lease) is
    safe. A row without `max_attempts` (claimed by a worker that had no handler for it,
    which uses no attempt) goes back to `pending`: the claim of a worker that has its
    handler sets it.

    Args:
        now: the injected clock's time, for `updated_at`, `scheduled_at` and the log line.
        mark: the fingerprint of an error text (`cronjobs.job.failures.fingerprint`),
            written with the error; None: NULL (the Failed page computes it from the
            error). The traceback of an earlier attempt is cleared: this error has none.

    Returns:
        `[{id, queue, status, type, root_id, idempotency_key}]` for each row changed
        (`status` is the new status).
    """
    stmt = (select(q.c.id, q.c.queue, q.c.type, q.c.root_id, q.c.idempotency_key,
                   q.c.attempts, q.c.max_attempts, q.c.worker_id, q.c.process_logs)
            .where(q.c.status == Status.RUNNING, q.c.locked_until < db_now(conn, -minutes * 60))
            .order_by(q.c.id).limit(limit))
    changed = []
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    for row in conn.execute(skip_locked(conn, stmt)).mappings().all():
        most = row["max_attempts"]
        exhausted = most is not None and row["attempts"] >= most
        status = Status.FAILED if exhausted else Status.PENDING
        error = (f"lease expired on worker {row['worker_id']} (worker lost?)"
                 + (f"; no attempts left ({row['attempts']}/{most})"
                    if exhausted else ""))
        line = limits.log_line(f"[{stamp}] recover-stale: {error} -> {status}") + "\n"
        values = {"status": status, "error": error, "locked_until": None, "updated_at": now,
                  "traceback": None, "fingerprint": mark(error) if mark else None,
                  "outcome_reason": Reason.LEASE_EXPIRED,
                  "process_logs": limits.bounded_log(row["process_logs"], line),
                  "finished_at" if exhausted else "scheduled_at": now}
        result = conn.execute(q.update().where(q.c.id == row["id"], q.c.status == Status.RUNNING,
                                               q.c.attempts == row["attempts"]).values(**values))
        if result.rowcount == 1:
            changed.append({"id": row["id"], "queue": row["queue"], "status": status,
                            "type": row["type"], "root_id": row["root_id"],
                            "idempotency_key": row["idempotency_key"]})
    return changed


def due_pending(conn: Connection, now: datetime, idle_seconds: float, limit: int = 1000,
                queues: list[str] | None = None) -> list[dict]:
    """Pending rows due for longer than `idle_seconds`: their message may be lost.

    Returns:
        `[{id, queue}]`, oldest first, at most `limit`.
    """
    cutoff = now - timedelta(seconds=idle_seconds)
    stmt = (select(q.c.id, q.c.queue).where(due(cutoff), q.c.updated_at <= cutoff)
            .order_by(q.c.priority, q.c.id).limit(limit))
    if queues:
        stmt = stmt.where(q.c.queue.in_(queues))
    return [dict(r) for r in conn.execute(stmt).mappings()]  # a plain read: never lock


def pending_by_queue(conn: Connection, now: datetime) -> dict[str, dict]:
    """Pending rows per queue: `{queue: {"pending": n, "due": n, "oldest_due_at": t}}`.

    `due` counts rows whose `scheduled_at` has passed (or is empty) at `now`;
    `oldest_due_at` is when the longest-waiting due row became due (naive UTC), or None.
    """
    is_due = due(now)
    became_due = func.coalesce(q.c.scheduled_at, q.c.created_at)
    stmt = (select(q.c.queue, func.count().label("pending"),
                   func.sum(case((is_due, 1), else_=0)).label("due"),
                   func.min(case((is_due, became_due), else_=None)).label("oldest_due_at"))
            .where(q.c.status == Status.PENDING).group_by(q.c.queue))
    return {r["queue"]: {"pending": int(r["pending"]), "due": int(r["due"] or 0),
                         "oldest_due_at": _as_datetime(r["oldest_due_at"])}
            for r in conn.execute(stmt).mappings()}


def _as_datetime(value):
    # SQLite returns MIN() over a CASE as text.
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def prune(conn: Connection, now: datetime, *, completed_days: float, failed_days: float,
          cancelled_days: float, batch: int, dry_run: bool = False) -> dict[str, int]:
    """Delete one batch per status of rows finished longer ago than their retention.

    Only rows without children are deleted, so the parent cascade never removes a row:
    a parent goes in a later batch, once every child was itself finished and past its
    retention and was deleted first (a finished parent outlives its whole subtree, and
    no `pending` or `running` row is ever deleted). Candidates are locked (SKIP LOCKED)
    and checked for children again before the delete: a child inserted meanwhile makes
    its foreign-key check wait for our lock, so it is seen, and its parent is kept.
    Call repeatedly until it returns zeros; each call holds locks for one batch only.

    Returns:
        `{"completed": n, "failed": n, "cancelled": n}` rows deleted (expired rows,
        never run, counted as cancelled); with `dry_run`, what a whole cleanup would
        delete now (`count_prunable`), nothing deleted.
    """
    if dry_run:
        return count_prunable(conn, now, completed_days=completed_days,
                              failed_days=failed_days, cancelled_days=cancelled_days)
    counts = {Status.COMPLETED.value: 0, Status.FAILED.value: 0, Status.CANCELLED.value: 0}
    for status, days in _retention(completed_days, failed_days, cancelled_days):
        cutoff = now - timedelta(days=days)
        child = aliased(q)
        stmt = (select(q.c.id).where(q.c.status == status, q.c.finished_at < cutoff,
                                     ~exists().where(child.c.parent_id == q.c.id))
                .order_by(q.c.id).limit(batch))
        ids = [r[0] for r in conn.execute(skip_locked(conn, stmt))]
        if ids:
            # One range over the parent index, filtered here: MariaDB turns an IN list of
            # 1,000 values into a derived table and scans the whole index for it (many
            # times the range's time at 1,000,000 rows).
            parents = {r[0] for r in conn.execute(
                select(q.c.parent_id).distinct()
                .where(q.c.parent_id.between(min(ids), max(ids))))}
            ids = [i for i in ids if i not in parents]
            ids = _outside_busy_families(conn, ids)
            if ids:
                conn.execute(q.delete().where(q.c.id.in_(ids)))
                delete_deliveries(conn, ids)  # their webhooks go with them
        counts[COUNTED_AS.get(status.value, status.value)] += len(ids)
    return counts


def _retention(completed_days: float, failed_days: float,
               cancelled_days: float) -> tuple[tuple[Status, float], ...]:
    """Each finished status with its retention (days); an `expired` row (never run, as a
    cancelled one) is kept as long as a cancelled one and counted with them (`COUNTED_AS`)."""
    return ((Status.COMPLETED, completed_days), (Status.FAILED, failed_days),
            (Status.CANCELLED, cancelled_days), (Status.EXPIRED, cancelled_days))


# The key of a status in cleanup's counts: expired rows are counted as cancelled ones.
COUNTED_AS = {Status.EXPIRED.value: Status.CANCELLED.value}


def count_prunable(conn: Connection, now: datetime, *, completed_days: float,
                   failed_days: float, cancelled_days: float) -> dict[str, int]:
    """The rows a whole cleanup would delete at `now` (naive UTC), per status, without
    deleting any: every finished row past its status's retention (days) except the
    ancestors of a row that stays (a pending or running row, or one within its
    retention), which `prune` never reaches, since a parent goes only after its last
    child. One statement (a recursive CTE over the kept rows' ancestors).

    Returns:
        `{"completed": n, "failed": n, "cancelled": n}` (expired rows counted as
        cancelled).
    """
    def past(table):
        return or_(*[and_(table.c.status == status, table.c.finished_at
                          < now - timedelta(days=days))
                     for status, days in _retention(completed_days, failed_days,
                                                    cancelled_days)])

    up = aliased(q)
    kept = (select(q.c.parent_id.label("id"))
            .where(q.c.parent_id.is_not(None), or_(q.c.finished_at.is_(None), ~past(q)))
            .cte("kept", recursive=True))
    kept = kept.union(select(up.c.parent_id).where(up.c.id == kept.c.id,
                                                   up.c.parent_id.is_not(None)))
    rows = conn.execute(select(q.c.status, func.count()).where(
        past(q), q.c.id.not_in(select(kept.c.id)),
        or_(and_(q.c.root_id.is_(None),
                 or_(q.c.parent_id.is_(None),
                     ~func.coalesce(q.c.idempotency_key, "").like("family:%"),
                     q.c.parent_id.not_in(_busy_roots()))),
            q.c.root_id.not_in(_busy_roots()))).group_by(q.c.status))
    counts = {Status.COMPLETED.value: 0, Status.FAILED.value: 0, Status.CANCELLED.value: 0}
    for status, n in rows:
        counts[COUNTED_AS.get(str(status), str(status))] += n
    return counts


def _busy_roots():
    """SELECT of the roots whose family is not over: the root or a row under it is
    pending, waiting or running, or one of its callback rows (`parent_id` the root, no
    `root_id`, key `family:...`) is (`jobs.live_in_families` answers the same for given
    roots, through the indexes)."""
    live = q.c.status.in_((Status.PENDING, Status.WAITING, Status.RUNNING))
    return union(select(q.c.id.label("root")).where(live),
                 select(q.c.root_id).where(live, q.c.root_id.is_not(None)),
                 select(q.c.parent_id).where(live, q.c.root_id.is_(None),
                                             q.c.idempotency_key.like("family:%")))


def _outside_busy_families(conn: Connection, ids: list[int]) -> list[int]:
    """Of finished rows `ids`, those not in a family that is still going (a row under a
    root whose family or callbacks have not finished stays, its callback rows too: its
    completion counts it)."""
    roots = {i: root if root is not None else parent for i, root, parent, key in conn.execute(
        select(q.c.id, q.c.root_id, q.c.parent_id, q.c.idempotency_key).where(
            q.c.id.in_(ids), q.c.parent_id.is_not(None)))
        if root is not None or (key or "").startswith("family:")}  # a callback: its root
    if not roots:
        return ids
    busy = live_in_families(conn, sorted(set(roots.values())))
    return [i for i in ids if roots.get(i) not in busy]


def prune_slots(conn: Connection, now: datetime, days: float = 400) -> int:
    """Delete slot records older than `days` (a yearly cron needs a year of them)."""
    cutoff = now - timedelta(days=days)
    return conn.execute(cronjob_slot.delete().where(cronjob_slot.c.claimed_at < cutoff)).rowcount
