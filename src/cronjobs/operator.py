"""Operator actions on one row, for the dashboard's buttons and the CLI: retry, cancel,
stop (a running job). Many rows at once (Retry all, `cronjobs failed --retry`) are a
bulk operation: `cronjobs.bulk`."""

from __future__ import annotations

import logging

from . import dispatching, store
from .app import App
from .db import run_in_transaction
from .errors import JobNotFound, JobStateError
from .status import Status

log = logging.getLogger("cronjobs.operator")


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
