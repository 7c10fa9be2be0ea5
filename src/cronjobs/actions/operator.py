"""Operator actions for the dashboard's buttons and the CLI: on one row, retry, cancel,
stop (a running job); on a family, cancel it (`cancel_family`); lifting a pause or a
block, which rings the queues it released.
Many rows at once (Retry all, `cronjobs failed --retry`) are a bulk operation:
`cronjobs.actions.bulk`."""

from __future__ import annotations

import logging

from .. import store
from ..app import App
from ..errors import JobNotFound, JobStateError
from ..family.view import read_family
from ..handler import task_name
from ..job import dispatching
from ..status import Status
from ..store import families
from ..store.db import run_in_transaction

log = logging.getLogger("cronjobs.actions.operator")


def retry(app: App, job_id: int, who: str = "operator") -> None:
    """Put failed row `job_id` back to `pending` (attempts reset) and send it to the broker.

    Raises:
        JobNotFound: no such row.
        JobStateError: the row is not `failed`.
    """
    now = app.clock.now()
    changed = run_in_transaction(
        app.engine, lambda c: store.actions.retry_failed(c, [job_id], now, who))
    if not changed:
        _refuse(app, job_id, Status.FAILED, "retried")
    _send(app, changed)


def cancel(app: App, job_id: int, who: str = "operator") -> None:
    """Cancel pending row `job_id`: it stays, `cancelled`, with a log line naming `who`
    (a task whose last run it is shows `cancelled`).

    Raises:
        JobNotFound: no such row.
        JobStateError: the row is not `pending` (a running row is never cut off from here).
    """
    now = app.clock.now()
    if not run_in_transaction(app.engine,
                              lambda c: store.actions.cancel_pending(c, [job_id], now, who)):
        _refuse(app, job_id, Status.PENDING, "cancelled")
    log.info("job %s cancelled by %s", job_id, who, extra={"trace_id": job_id})


def stop(app: App, job_id: int, who: str = "operator") -> dict:
    """Ask the worker running row `job_id` to stop it: a stop request for the row's
    current attempt. The worker reads it within about a second (`WorkerProcess
    .watch_runs`) and ends the job the way MAX_RUNTIME does (its job process killed, a
    new one takes the slot); the row ends `failed` with outcome reason `stopped`
    ("stopped by an operator"), not retried. A second Stop of the same run changes
    nothing. Only jobs run by a worker (`cronjobs worker`, `serve`) are stopped.

    Returns:
        `{id, attempts, worker_id, status}` of the row asked to stop.

    Raises:
        JobNotFound: no such row.
        JobStateError: the row is not `running` (nothing is written).
    """
    now = app.clock.now()
    row = run_in_transaction(app.engine,
                             lambda c: store.stops.request_stop(c, job_id, now, who))
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    if row["status"] != Status.RUNNING:
        raise JobStateError(f"job {job_id} is {row['status']}; only running rows can be "
                            f"stopped")
    log.info("job %s: stop requested by %s (attempt %s on worker %s)", job_id, who,
             row["attempts"], row["worker_id"], extra={"trace_id": job_id})
    return row


def cancel_family(app: App, root_id: int, *, by: str) -> int:
    """Cancel family `root_id` (the root of row `root_id`'s family when it is a row under
    one): its pending rows (the root too) end `cancelled`, as Cancel does, and a stop is
    requested for each running one, as Stop does (the worker ends it within a few
    seconds, `failed`, reason `stopped`). Rows already finished are left as they are.

    Pending rows are cancelled 500 a transaction; a row dispatched meanwhile by a
    running row being stopped is cancelled when it is seen, not later.

    Args:
        root_id: a row id of the family.
        by: who asked, for the rows' process logs (`dashboard`, `cli`).

    Returns:
        Rows changed: pending rows cancelled plus running rows asked to stop.

    Raises:
        JobNotFound: no row `root_id`.
    """
    with app.engine.connect() as conn:
        fam = read_family(conn, root_id, failures=False)
    if fam is None:
        raise JobNotFound(f"no job with id {root_id}")
    root = fam.root_id
    changed = 0
    while True:
        now = app.clock.now()
        done = run_in_transaction(app.engine, lambda c, now=now: store.actions.cancel_pending(
            c, [root, *families.family_ids(c, root, [Status.PENDING], 500)], now, by))
        changed += len(done)
        if not done:
            break
    with app.engine.connect() as conn:
        running = families.family_ids(conn, root, [Status.RUNNING], 100_000)
    if fam.root_status == Status.RUNNING:
        running.insert(0, root)
    for job_id in running:
        now = app.clock.now()
        row = run_in_transaction(app.engine,
                                 lambda c, j=job_id, now=now: store.stops.request_stop(
                                     c, j, now, by))
        changed += bool(row and row["status"] == Status.RUNNING)
    log.info("family %s cancelled by %s: %s rows cancelled or asked to stop", root, by,
             changed, extra={"trace_id": root})
    return changed


def resume(app: App, scope: str, name: str) -> bool:
    """Lift the pause of queue, type or task `name` (`scope`) and ring the queues whose
    due rows it held (they wait for no doorbell of their own).

    Returns:
        True if a pause was lifted, False if there was none.

    Raises:
        InvalidJob: a bad scope or name (`store.resume`'s).
    """
    lifted = run_in_transaction(app.engine, lambda c: store.resume(c, scope, name))
    if lifted and scope == "queue":
        ring_due(app, queue=name)
    elif lifted:
        ring_due(app, types=[name] if scope == "type" else [
            t for t in app.handlers.registered_handlers() if task_name(t) == name])
    return bool(lifted)


def unblock(app: App, block_id: int | None = None, *, job_type: str | None = None,
            limit_key: str | None = None) -> bool:
    """Lift block `block_id` (or that of `job_type` and `limit_key`, `store.unblock`) and
    ring the queues of the type's due rows: the row that met the flood wait waits for its
    block, with no doorbell of its own.

    Returns:
        True if a block was lifted, False if there was none.
    """
    def lift(conn) -> str | None:
        kind = job_type if block_id is None else store.flow.block_type(conn, block_id)
        done = store.unblock(conn, block_id, job_type=job_type, limit_key=limit_key)
        return kind if done else None

    lifted = run_in_transaction(app.engine, lift)
    if lifted is not None:
        ring_due(app, types=[lifted])
    return lifted is not None


def ring_due(app: App, *, queue: str | None = None, types: list[str] | None = None) -> None:
    """Ring `queue` if it holds due rows, or each queue that holds due rows of `types`,
    once (after a commit that released them: `store.flow.due_queues`)."""
    now = app.clock.now()
    with app.engine.connect() as conn:
        queues = store.flow.due_queues(conn, now, queue=queue, types=types)
    for name, job_id in queues.items():
        dispatching.send(app, job_id, name)


def _refuse(app: App, job_id: int, needed: str, verb: str) -> None:
    with app.engine.connect() as conn:
        row = store.get_job(conn, job_id, ["status"])
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    raise JobStateError(f"job {job_id} is {row['status']}; only {needed} rows can be {verb}")


def _send(app: App, rows: list[dict]) -> None:
    for row in rows:
        log.info("job %s retried", row["id"], extra={"trace_id": row["id"]})
        dispatching.send(app, row["id"], row["queue"])
