"""Operator actions on rows (dashboard buttons, bulk operations): retry, cancel, delete.

Each takes a list of ids (or one id) and changes only the rows still in the state it
expects; a bulk operation (`cronjobs.actions.bulk`) calls one per batch."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, bindparam, or_, select

from .. import limits
from ..status import FINAL, Status
from .models import cronjob_queue as q
from .models import cronjob_runtime as rt

CANCELLABLE = (Status.PENDING, Status.WAITING)  # what an operator's cancel takes


def retry_failed(conn: Connection, ids: list[int], now: datetime,
                 who: str = "operator") -> list[dict]:
    """Put the rows of `ids` that are still `failed` back to `pending`, due now, with their
    attempts reset to 0; each gets a process-log line naming `who`.

    Rows that are no longer `failed` (retried, deleted or changed by someone else
    meanwhile) are left alone. The failed rows are locked first (in id order), so each is
    reset by exactly one caller, and then updated with one executemany: at 500 rows a
    batch this costs a few statements, not 500 compiled UPDATEs. Keep `ids` under 1,000:
    MariaDB turns a longer IN list into a derived table and scans for it.

    Args:
        ids: row ids (a batch of a bulk operation, or one row).
        now: naive UTC, for `updated_at` and the log line.
        who: who asked, for the log line (`dashboard (operation 12)`).

    Returns:
        `[{id, queue}]` of the rows changed (to be sent to the broker after commit).
    """
    if not ids:
        return []
    rows = conn.execute(select(q.c.id, q.c.queue, q.c.process_logs)
                        .where(q.c.id.in_(ids), q.c.status == Status.FAILED)
                        .order_by(q.c.id).with_for_update()).mappings().all()
    if not rows:
        return []
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    line = limits.log_line(f"[{stamp}] retried by {who}: failed -> pending, attempts reset") + "\n"
    conn.execute(q.update().where(q.c.id == bindparam("b_id"), q.c.status == Status.FAILED).values(
        status=Status.PENDING, attempts=0, scheduled_at=None, started_at=None, finished_at=None,
        locked_until=None, updated_at=now, process_logs=bindparam("b_log")),
        [{"b_id": r["id"], "b_log": limits.bounded_log(r["process_logs"], line)} for r in rows])
    return [{"id": r["id"], "queue": r["queue"]} for r in rows]


def cancel_pending(conn: Connection, ids: list[int], now: datetime,
                   who: str = "operator", reason: str | None = None) -> list[dict]:
    """Cancel the rows of `ids` that are still `pending` or `waiting` (for their
    dependencies; a running row is not touched: stopping a job is another action). Each
    gets `finished_at`, a process-log line naming `who`, and keeps its row (`cancelled`,
    to be seen; `cleanup` removes it after its retention); a task whose last run it is
    shows `cancelled`.

    Locked first in id order, then one executemany, as `retry_failed` (keep `ids` under
    1,000).

    Args:
        reason: the rows' `outcome_reason` (`status.Reason`; None: an operator's own
            cancel, no reason).

    Returns:
        `[{id, queue, type, root_id, idempotency_key, callback_url, attempts,
        max_attempts, error, outcome_reason}]` of the rows cancelled.
    """
    if not ids:
        return []
    rows = conn.execute(select(q.c.id, q.c.queue, q.c.type, q.c.root_id, q.c.idempotency_key,
                               q.c.process_logs,
                               q.c.callback_url, q.c.attempts, q.c.max_attempts, q.c.error)
                        .where(q.c.id.in_(ids), q.c.status.in_(CANCELLABLE))
                        .order_by(q.c.id).with_for_update()).mappings().all()
    if not rows:
        return []
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    line = limits.log_line(f"[{stamp}] cancelled by {who}") + "\n"
    # (no IN list here: an expanding parameter cannot go with executemany)
    conn.execute(q.update().where(q.c.id == bindparam("b_id"),
                                  or_(*[q.c.status == s for s in CANCELLABLE]))
                 .values(status=Status.CANCELLED, finished_at=now, updated_at=now,
                         locked_until=None, outcome_reason=reason,
                         process_logs=bindparam("b_log")),
                 [{"b_id": r["id"], "b_log": limits.bounded_log(r["process_logs"], line)}
                  for r in rows])
    changed = [r["id"] for r in rows]
    conn.execute(rt.update().where(rt.c.last_job_id.in_(changed)).values(
        last_status=Status.CANCELLED, updated_at=now))
    return [{"id": r["id"], "queue": r["queue"], "type": r["type"], "root_id": r["root_id"],
             "idempotency_key": r["idempotency_key"],
             # for the webhook of a row that ends without a run (`family.unrun`)
             "callback_url": r["callback_url"], "attempts": r["attempts"],
             "max_attempts": r["max_attempts"], "error": r["error"],
             "outcome_reason": reason} for r in rows]


def delete_finished(conn: Connection, ids: list[int], now: datetime,
                    who: str = "operator") -> list[dict]:
    """Delete the rows of `ids` that are finished (completed, failed, cancelled) and have
    no child row left, children before parents.

    The rule is `maintenance.prune`'s: a row with any child (whatever its status) is
    kept, so the parent cascade never removes a row and no pending or running row, nor a
    row above one, is ever deleted. A parent goes once its children are gone: deleted
    earlier in the same call (this batch is worked leaf first, level by level) or by an
    earlier call (a bulk delete takes its batches newest id first, and children are newer
    than their parent). The candidates are locked first (in id order): a child inserted
    meanwhile makes its foreign-key check wait for our lock, so it is seen and its parent
    kept; a retry of a candidate waits and then finds it gone.

    Args:
        ids: row ids (under 1,000: one IN list each for the rows and their children).
        now, who: unused (the rows are gone); the signature of every bulk action.

    Returns:
        `[{id, queue}]` of the rows deleted.
    """
    if not ids:
        return []
    rows = conn.execute(select(q.c.id, q.c.queue)
                        .where(q.c.id.in_(ids), q.c.status.in_(FINAL))
                        .order_by(q.c.id).with_for_update()).mappings().all()
    left = {r["id"]: r["queue"] for r in rows}
    deleted: list[dict] = []
    while left:
        parents = {r[0] for r in conn.execute(
            select(q.c.parent_id).distinct().where(q.c.parent_id.in_(list(left))))}
        leaves = sorted(i for i in left if i not in parents)
        if not leaves:
            break
        conn.execute(q.delete().where(q.c.id.in_(leaves)))
        deleted += [{"id": i, "queue": left.pop(i)} for i in leaves]
    return deleted
