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
from ..family.settle import settle_rows
from ..handler import task_name
from ..job import dispatching
from ..job.finishing import ring
from ..schedule.entries import schedule_tasks
from ..status import Reason, Status
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
    """Cancel pending (or waiting) row `job_id`: it stays, `cancelled`, with a log line
    naming `who` (a task whose last run it is shows `cancelled`); the rows waiting for it
    are cancelled, or released when they allow a failed dependency.

    Raises:
        JobNotFound: no such row.
        JobStateError: the row is not `pending` or `waiting` (a running row is never cut
            off from here).
    """
    now = app.clock.now()

    def work(conn) -> tuple[list, list]:
        changed = store.actions.cancel_pending(conn, [job_id], now, who)
        return changed, settle_rows(conn, app, changed, now)

    changed, released = run_in_transaction(app.engine, work)
    if not changed:
        _refuse(app, job_id, "pending or waiting", "cancelled")
    ring(app, released)
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


def cancel_family(app: App, job_id: int, *, who: str = "operator") -> dict:
    """Cancel the family of row `job_id` (its root and every row under it): pending rows
    end `cancelled` (reason `cancelled.family`, no attempt used), running ones are asked to
    stop (as Stop does; they end `failed`, reason `stopped`, within about a second). The
    family then completes with the outcome `cancelled` and runs its callbacks, once its
    last running row has ended.

    Returns:
        `{"root": id, "cancelled": rows cancelled, "stopping": rows asked to stop}`.

    Raises:
        JobNotFound: no such row.
    """
    now = app.clock.now()

    def work(conn) -> tuple[dict, list]:
        row = store.get_job(conn, job_id, ["id", "root_id"])
        if row is None:
            raise JobNotFound(f"no job with id {job_id}")
        root_id = row["root_id"] or row["id"]
        stopping = [r for r in (store.stops.request_stop(conn, i, now, who)
                                for i in families.ids_in(conn, root_id, Status.RUNNING))
                    if r is not None and r["status"] == Status.RUNNING]
        pending = sorted(families.ids_in(conn, root_id, Status.PENDING)
                         + families.ids_in(conn, root_id, Status.WAITING))
        changed = []
        for start in range(0, len(pending), 1000):
            changed += store.actions.cancel_pending(conn, pending[start:start + 1000], now,
                                                    who, reason=Reason.FAMILY_CANCELLED)
        families.mark_cancelled(conn, root_id, Reason.FAMILY_CANCELLED)
        started = settle_rows(conn, app, changed, now)
        return {"root": root_id, "cancelled": len(changed), "stopping": len(stopping)}, started

    done, started = run_in_transaction(app.engine, work)
    log.info("family %s cancelled by %s: %s rows cancelled, %s asked to stop", done["root"],
             who, done["cancelled"], done["stopping"], extra={"trace_id": done["root"]})
    ring(app, started)
    return done


def unknown_target(app: App, scope: str, name: str) -> str | None:
    """The warning for a pause of a name no handler of `app` knows, or None.

    A pause of an unknown queue, type or task still holds (another codebase's workers
    may run it), but a typo should not go unnoticed: `cronjobs pause` prints this text,
    `POST /api/pauses` answers it as `"warning"`.

    Args:
        app: the App whose handlers and schedule entries count as known.
        scope: `queue`, `type` or `task`.
        name: the paused name.

    Returns:
        One line (`no registered handler has type 'x' (a typo?); ...`), or None when known.
    """
    known = {"queue": lambda: name in app.queues(),
             "type": lambda: app.resolve(name) is not None,
             "task": lambda: name in schedule_tasks(app)}[scope]()
    if known:
        return None
    return (f"no registered handler has {scope} {name[:80]!r} (a typo?); `cronjobs tasks` "
            f"and `cronjobs list-handlers` list them")


def resume(app: App, scope: str, name: str) -> bool:
    """Lift the pause of queue, type or task `name` (`scope`) and ring the queues whose
    due rows it held (they wait for no doorbell of their own). A task's count of failed
    runs in a row (`AUTO_PAUSE_AFTER_FAILURES`) starts again from 0.

    Returns:
        True if a pause was lifted, False if there was none.

    Raises:
        InvalidJob: a bad scope or name (`store.resume`'s).
    """
    def lift(conn) -> int:
        done = store.resume(conn, scope, name)
        if scope == "task":  # a resumed task starts counting failed runs afresh
            store.runtime.reset_failure_streak(conn, name, app.clock.now())
        return done

    lifted = run_in_transaction(app.engine, lift)
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
