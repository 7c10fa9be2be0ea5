"""Bulk operations on many rows: retry, cancel or delete the rows ticked on the Queue or
Failed page or "all N matching" a filter, and `cronjobs failed --retry`.

An operation is recorded (`cronjob_operation`): what (`action`, one of `ACTIONS`), on which
rows (a `Selection`, kept as its canonical key), its snapshot of row ids taken at the
start (`cronjob_operation_batch`, 500 ids a batch), progress counts and a lease. The rules:

- **Snapshot at the click.** The ids matching the selection, in the statuses the action
  works on, when it starts are the work; rows that match later are not in it (start
  another operation for them). The dashboard refuses a snapshot of more than
  `SNAPSHOT_MAX_ROWS` rows (narrow the filter); the CLI takes any number.
- **Bounded batches.** Each batch is one transaction: the action changes the rows of the
  batch that are still in the state it expects (retry: still `failed`), the batch is
  deleted and the counts move, together. A row is changed once; rows that stopped
  matching meanwhile are counted as skipped and left alone.
- **One running per selection**, whatever the action, decided by the database (a unique
  key on the running selection): a second start, from any process, is refused with
  `OperationRunning`, naming the operation and its progress.
- **Lease.** The runner renews its lease (`LEASE_SECONDS`, on the database's clock) with
  every batch. An operation whose lease ran out is *stalled* (its process died or hangs):
  the next start of the same selection (a click, `cronjobs failed --retry`) or the
  operation page's Resume takes it over and goes on with the batches left. Batches are
  fenced by the runner's id, so a runner that lost its operation writes nothing more.

The actions (`cronjobs.store.actions`): **retry** puts failed rows back to pending
(attempts reset) and rings their queues; **cancel** ends pending rows as `cancelled` and
keeps them (as the Job page's Cancel does; a running row is not stopped); **delete**
removes finished rows that have no child left, children first (batches newest id first),
so a row with a pending or running descendant is never deleted, and a parent goes only
with its whole subtree selected.

The dashboard runs an operation in a background thread of its process
(`run_in_background`) and shows its page; the CLI runs it in the foreground (`run`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection

from .. import store
from ..app import App
from ..errors import (
    CronjobsError,
    DatabaseUnavailable,
    OperationNotRunning,
    OperationRunning,
    SelectionTooLarge,
    StoreError,
)
from ..family.settle import Started as FamilyCallback
from ..family.settle import settle_ids
from ..job.dispatching import DOORBELLS_PER_QUEUE, send
from ..status import FINAL, Status
from ..store.db import retry_while_unavailable, run_in_transaction
from .selection import Selection

log = logging.getLogger("cronjobs.actions.bulk")

BATCH_ROWS = 500      # ids per batch (one transaction); under MariaDB's 1,000-value IN-list limit
LEASE_SECONDS = 60.0  # a runner that wrote no batch for this long is stalled (database clock)


@dataclass(frozen=True)
class Action:
    """What an operation does to each batch.

    Attributes:
        name: `retry`, `cancel`, `delete` (the operation's `action` column).
        verb: past tense for messages (`retried`).
        apply: `fn(conn, ids, now, who) -> [{id, queue}]`, in the batch's transaction:
            change the rows of `ids` still in the state the action expects, return those
            changed.
        statuses: the row statuses it works on: the snapshot takes only these rows.
        ring: send the changed rows' queues a message after the commit (they are due).
        newest_first: take the snapshot's batches from the highest id down (a delete:
            children, which are newer, go before their parent).
        settles: the changed rows are finished: their families are settled in the
            batch's transaction (`family.settle`), completed ones' callbacks sent after.
    """

    name: str
    verb: str
    apply: Callable[..., list[dict]]
    statuses: tuple[str, ...]
    ring: bool = False
    newest_first: bool = False
    settles: bool = False


ACTIONS = {
    "retry": Action("retry", "retried", store.actions.retry_failed, (Status.FAILED,),
                    ring=True),
    "cancel": Action("cancel", "cancelled", store.actions.cancel_pending, (Status.PENDING,),
                     settles=True),
    "delete": Action("delete", "deleted", store.actions.delete_finished, FINAL,
                     newest_first=True),
}
SNAPSHOT_MAX_ROWS = 100_000  # the most rows a dashboard operation takes (`start(max_rows=)`)


@dataclass(frozen=True)
class Started:
    """A started (or taken over) operation and the runner id that holds it.

    Attributes:
        operation: its row (`store.operations.OPERATION_COLUMNS` plus `stalled`).
        owner: the runner id to pass to `run`.
        resumed: True when a stalled operation was taken over, not a new one started.
    """

    operation: dict
    owner: str
    resumed: bool = False


def _host() -> str:
    """`host:pid` of this process, within 119 characters."""
    pid = f":{os.getpid()}"
    return socket.gethostname()[:119 - len(pid)] + pid


def new_owner() -> str:
    """A runner id: `host:pid:random`, within 128 characters."""
    return f"{_host()}:{uuid.uuid4().hex[:8]}"


def start(app: App, action: str, selection: Selection, who: str,
          max_rows: int | None = None) -> Started:
    """Start an operation: record it and its snapshot of the selection's row ids at once.

    The snapshot holds the selection's rows in the statuses the action works on (retry:
    failed; cancel: pending; delete: completed, failed, cancelled). If an operation of the
    same selection (whatever its action) is running with a live lease, nothing is started;
    if its lease ran out (stalled), it is taken over and resumed.

    Args:
        action: a name in `ACTIONS`.
        selection: the rows.
        who: who asks (`dashboard`, `cli`), for the operation row and the rows' logs.
        max_rows: refuse a snapshot of more rows (the dashboard: `SNAPSHOT_MAX_ROWS`);
            None: no limit (the CLI, which runs the batches in the foreground).

    Returns:
        `Started`; pass it to `run` or `run_in_background`.

    Raises:
        OperationRunning: an operation of this selection is running (its row attached).
        SelectionTooLarge: more than `max_rows` rows; nothing was recorded.
        CronjobsError: unknown action.
    """
    if action not in ACTIONS:
        raise CronjobsError(f"unknown bulk action {action!r}; known: {', '.join(ACTIONS)}")
    owner = new_owner()
    for _ in range(3):  # the running one may finish between our insert and our look
        op_id = run_in_transaction(app.engine, lambda c: _create(
            c, app, ACTIONS[action], selection, who, owner, max_rows))
        if op_id is not None:
            return Started(get(app, op_id), owner)
        took = run_in_transaction(app.engine, lambda c: store.operations.take_over(
            c, owner, LEASE_SECONDS, app.clock.now(), running_key=selection.running_key()))
        if took is not None:
            log.info("operation %s (%s %s) stalled; taken over by %s", took, action,
                     selection.key(), owner)
            return Started(get(app, took), owner, resumed=True)
        with app.engine.connect() as conn:
            running = store.operations.running_operation(conn, selection.running_key())
        if running is not None:
            raise OperationRunning(running)
    raise StoreError(f"could not start a {action} of {selection.key()}: operations of it "
                     "kept finishing while it started; try again")


def _create(conn: Connection, app: App, action: Action, selection: Selection, who: str,
            owner: str, max_rows: int | None) -> int | None:
    now = app.clock.now()
    op_id = store.operations.insert_operation(
        conn, action=action.name, selection=selection.key(),
        running_key=selection.running_key(), created_by=who[:64], created_host=_host(),
        owner=owner, lease_seconds=LEASE_SECONDS, now=now)
    if op_id is None:
        return None
    ids = store.selection.select_ids(conn, selection.rows(action.statuses),
                                     limit=None if max_rows is None else max_rows + 1)
    if max_rows is not None and len(ids) > max_rows:  # raised: the insert is rolled back
        raise SelectionTooLarge(too_large(action.name, max_rows), max_rows)
    if action.newest_first:
        ids.reverse()
    store.operations.add_batches(conn, op_id, [ids[i:i + BATCH_ROWS]
                                               for i in range(0, len(ids), BATCH_ROWS)])
    store.operations.set_total(conn, op_id, len(ids), now)
    log.info("operation %s: %s %s (%s rows) started by %s", op_id, action.name,
             selection.key(), len(ids), who)
    return op_id


def too_large(action: str, max_rows: int) -> str:
    """The message refusing a selection of more than `max_rows` rows."""
    return (f"this selection has more than {max_rows:,} rows to {action}; one operation "
            f"takes at most {max_rows:,}: narrow the filter (a type, a task, a status)")


def preview(app: App, action: str, selection: Selection, cap: int) -> tuple[int, bool]:
    """How many rows an operation of `action` on `selection` would take now (the
    confirmation page), counted up to `cap`: `(n, capped)`."""
    with app.engine.connect() as conn:
        return store.selection.count_rows(conn, selection.rows(ACTIONS[action].statuses),
                                          cap)


def resume(app: App, operation_id: int) -> Started:
    """Take over stalled operation `operation_id` (the operation page's Resume).

    Returns:
        `Started` (resumed); pass it to `run` or `run_in_background`.

    Raises:
        OperationRunning: it is running with a live lease.
        OperationNotRunning: it is done or failed (nothing to resume), or does not exist.
    """
    owner = new_owner()
    took = run_in_transaction(app.engine, lambda c: store.operations.take_over(
        c, owner, LEASE_SECONDS, app.clock.now(), operation_id=operation_id))
    operation = get(app, operation_id)
    if took is not None:
        return Started(operation, owner, resumed=True)
    if operation is None:
        raise OperationNotRunning(f"no operation with id {operation_id}")
    if operation["status"] == "running":
        raise OperationRunning(operation)
    raise OperationNotRunning(f"operation {operation_id} is {operation['status']}; only a "
                              "stalled operation can be resumed")


def run(app: App, started: Started, on_batch: Callable[[dict], None] | None = None) -> dict:
    """Run the batches of a started operation here until none is left.

    Each batch is one transaction (see the module's rules); the changed rows' queues are
    rung after each commit. While the database is unreachable a batch is tried again (3 s,
    doubling) for up to `LEASE_SECONDS`; after that the operation is left running with its
    lease running out (stalled, resumable) and `DatabaseUnavailable` is raised. Any other
    error marks the operation `failed` with its message and is raised.

    Args:
        started: what `start` or `resume` returned.
        on_batch: called with the operation row after each batch (the CLI prints it).

    Returns:
        The operation row at the end: `done`, or still `running` under another owner when
        it was taken over (this runner's lease had run out).
    """
    if started.operation["status"] != "running":  # an empty snapshot is done at once
        return started.operation
    action = ACTIONS[started.operation["action"]]
    op_id = started.operation["id"]
    who = f"{started.operation['created_by']} (operation {op_id})"
    while True:
        try:
            changed, operation, callbacks = retry_while_unavailable(
                lambda: run_in_transaction(app.engine, lambda c: _batch(
                    c, app, op_id, started.owner, action, who)),
                f"running operation {op_id}", give_up_seconds=LEASE_SECONDS)
        except _Lost:
            log.warning("operation %s was taken over by another runner; %s stops",
                        op_id, started.owner)
            return get(app, op_id)
        except Exception as exc:
            if not isinstance(exc, DatabaseUnavailable):  # unreachable: left to stall
                _fail(app, op_id, started.owner, exc)
            raise
        if action.ring:
            _ring(app, changed)
        for callback in callbacks:  # families the batch completed
            send(app, callback.id, callback.queue)
        if on_batch is not None:
            on_batch(operation)
        if operation["status"] != "running" or operation["owner"] != started.owner:
            return operation


class _Lost(Exception):
    """Raised inside a batch's transaction when its runner no longer holds the operation:
    the batch's row changes are rolled back."""


def _batch(conn: Connection, app: App, op_id: int, owner: str, action: Action,
           who: str) -> tuple[list[dict], dict, list[FamilyCallback]]:
    now = app.clock.now()
    batch = store.operations.next_batch(conn, op_id)
    changed: list[dict] = []
    callbacks: list[FamilyCallback] = []
    if batch is None:  # nothing left (a resumed operation whose last batch had committed)
        if not store.operations.finish(conn, op_id, now, owner=owner):
            raise _Lost()
    else:
        seq, ids = batch
        changed = action.apply(conn, ids, now, who)
        if action.settles:
            callbacks = settle_ids(conn, app, [row["id"] for row in changed], now)
        if not store.operations.record_batch(conn, op_id, owner, seq, len(ids), len(changed),
                                             LEASE_SECONDS, now):
            raise _Lost()
    return changed, store.operations.get_operation(conn, op_id), callbacks


def _fail(app: App, op_id: int, owner: str, exc: Exception) -> None:
    error = f"{type(exc).__name__}: {exc}"[:2000]
    log.error("operation %s failed: %s", op_id, error)
    try:
        run_in_transaction(app.engine, lambda c: store.operations.finish(
            c, op_id, app.clock.now(), error=error, owner=owner))
    except CronjobsError as again:  # stays running; its lease runs out (stalled)
        log.warning("could not mark operation %s failed (%s)", op_id, again)


def _ring(app: App, changed: list[dict]) -> None:
    """A message per queue rings a worker that claims all it can (`queue.dispatch_many`
    does the same): at most `DOORBELLS_PER_QUEUE` messages per queue per batch."""
    sent: dict[str, int] = {}
    for row in changed:
        if sent.get(row["queue"], 0) < DOORBELLS_PER_QUEUE:
            sent[row["queue"]] = sent.get(row["queue"], 0) + 1
            send(app, row["id"], row["queue"])


def release(app: App, started: Started) -> None:
    """Give up a started operation's lease now (the CLI on Ctrl-C): it is stalled at once,
    and the next start of its selection resumes it instead of waiting `LEASE_SECONDS`."""
    run_in_transaction(app.engine, lambda c: store.operations.release(
        c, started.operation["id"], started.owner, app.clock.now()))


def run_in_background(app: App, started: Started) -> threading.Thread:
    """Run the operation in a daemon thread of this process (the dashboard's way: the
    request returns at once). If the process dies, the lease runs out and the operation is
    stalled, to be resumed by the next start of its selection.

    Returns:
        The started thread.
    """
    def body() -> None:
        try:
            run(app, started)
        except Exception as exc:  # logged; the operation row says failed or stalled
            log.error("operation %s stopped: %s", started.operation["id"], exc)

    thread = threading.Thread(target=body, name=f"cronjobs-operation-{started.operation['id']}",
                              daemon=True)
    thread.start()
    return thread


def get(app: App, operation_id: int) -> dict | None:
    """Operation `operation_id` (its columns, and `stalled`: running with its lease run
    out), or None."""
    with app.engine.connect() as conn:
        return store.operations.get_operation(conn, operation_id)


def recent(app: App, limit: int = 10) -> list[dict]:
    """The newest `limit` operations, newest first."""
    with app.engine.connect() as conn:
        return store.operations.recent_operations(conn, limit)
