"""The public queue API: dispatch, submit, dispatch_many, get, children, family, process,
recover_stale, cleanup; wait (a row's `Result` once it is final).

The CLI and the dashboard call these same functions. Every function takes an optional
`app=` (default: `cronjobs.app.current()`). Rows are written by `cronjobs.job.dispatching`
(the one path of the scheduler, manual runs and handlers' children too); rows run here
(`process`) by an `executor.Executor` built for the call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from . import store
from .app import App, current
from .errors import InvalidJob, JobNotFound
from .family.settle import settle_rows
from .family.view import Family, read_family
from .job import dispatching, failures, waiting
from .job.dispatching import Dispatched, build_row
from .job.waiting import Result
from .status import Status
from .store.db import run_in_transaction
from .store.pingruns import end_overdue_pings

if TYPE_CHECKING:  # a caller that passes a Session has imported the ORM already
    from sqlalchemy.orm import Session

log = logging.getLogger("cronjobs.queue")

# `build_row` (the column values of a checked new row) lives in `cronjobs.job.dispatching`.
__all__ = ["Dispatched", "Family", "build_row", "children", "cleanup", "dispatch",
           "dispatch_many", "family", "get", "process", "recover_stale", "submit"]
__all__ += ["Result", "wait"]


def dispatch(type: str, payload: dict | None = None, *, idempotency_key: str | None = None,
             parent_id: int | None = None, priority: int = 5, title: str | None = None,
             scheduled_at: datetime | None = None, max_attempts: int | None = None,
             queue: str | None = None, known_type: bool = True, session: Session | None = None,
             app: App | None = None, depends_on: Iterable[int] | None = None,
             allow_failed: bool = False, expires_at: datetime | None = None,
             expires_in: float | str | timedelta | None = None, callback_url: str | None = None
             ) -> int:
    """Add a job row and send its id to the broker; return the row id.

    Args:
        type: the job type (`acme.quotasync.execute`); a handler must be registered for
            it in this process, unless `known_type` is False or the type matches
            `CRONJOBS_REMOTE_TYPES`.
        payload: JSON-serialisable dict handed to `handle()`.
        idempotency_key: unique over the whole table; when taken, the existing row's id
            is returned and nothing is inserted (so a positive id is no proof of a new row).
        parent_id: id of the parent row (deleting the parent deletes this row).
        priority: lower runs first (default 5).
        scheduled_at: do not run before this instant (aware, or naive UTC); None = now.
        title: up to 255 characters, shown in the dashboard.
        max_attempts: overrides the handler's MAX_ATTEMPTS for this row (>= 1). None: the
            MAX_ATTEMPTS of the handler of the worker that claims it (set at claim).
        queue: broker queue (default: the handler's QUEUE, else the default queue).
        known_type: False accepts a type no handler here knows, run by another codebase's
            workers (they decide its attempts and runtime; pass their `queue`).
        session: the caller's SQLAlchemy Session: the row is written in its transaction
            and the message is sent only after it commits (nothing on rollback).
        depends_on: ids of rows to finish first (a family root: its whole family): the
            row is `waiting` until then. Refused for a missing id or a cycle.
        allow_failed: False (default): a failed or cancelled dependency cancels the row
            (reason `dependency_failed`, no attempt used); True: it runs anyway.
        expires_at, expires_in: a deadline (a time; or 90, `"30s"`, a timedelta from
            `scheduled_at`, else now; not both): not started by then, the row ends `expired`.
        callback_url: http(s) URL (<= 2,048 chars) POSTed each finished attempt, signed
            (docs/webhooks.md); wins over WEBHOOK_URL; bad: `InvalidCallbackUrl`.

    Returns:
        The id of the new row, or of the row that already holds `idempotency_key`.

    Raises:
        InvalidJob: bad argument, with a one-line reason naming it: an unknown job type
            (with a "did you mean" hint), payload not a JSON object, over 1,000,000 bytes
            of JSON or nested over 100 levels, type over 160 characters, queue over 64 or
            with characters outside `[A-Za-z0-9_.-]`, key over 191, title over 255
            (limits: `cronjobs.limits`), parent missing, an expiry not after the start...
        DatabaseUnavailable: the database cannot be reached.
    """
    return submit(**locals()).id  # every argument of dispatch is one of submit's


def submit(type: str, payload: dict | None = None, *, idempotency_key: str | None = None,
           parent_id: int | None = None, priority: int = 5,
           scheduled_at: datetime | None = None, title: str | None = None,
           max_attempts: int | None = None, queue: str | None = None,
           known_type: bool = True, session: Session | None = None,
           app: App | None = None, depends_on: Iterable[int] | None = None,
           allow_failed: bool = False, expires_at: datetime | None = None,
           expires_in: float | str | timedelta | None = None,
           callback_url: str | None = None) -> Dispatched:
    """Like `dispatch()`, but tell new work from an existing row: returns `Dispatched`
    (its `status` is `waiting` for a row that waits for its dependencies)."""
    return dispatching.submit(app or current(), type, payload, session=session,
                              idempotency_key=idempotency_key, parent_id=parent_id,
                              priority=priority, scheduled_at=scheduled_at, title=title,
                              max_attempts=max_attempts, queue=queue, known_type=known_type,
                              depends_on=depends_on, allow_failed=allow_failed,
                              expires_at=expires_at, expires_in=expires_in,
                              callback_url=callback_url)


def dispatch_many(jobs: Iterable[dict], *, session: Session | None = None,
                  app: App | None = None) -> list[int]:
    """Insert many rows in one round trip; return their ids in input order. The broker
    gets at most 16 messages per queue for the rows that are due now (messages wake
    workers; they claim rows, not message ids) and one per row scheduled for later.

    Args:
        jobs: dicts with the keyword arguments of `dispatch` (`type` required;
            `known_type: False`, `depends_on`, `allow_failed`, `expires_at` or
            `expires_in`, `callback_url` per row; rows with
            `depends_on` are inserted one by one, in the same transaction). When any
            row has an `idempotency_key`, the rows are inserted one by one (in the same
            single transaction), so a taken key gives the existing id as `dispatch` does.
        session: as in `dispatch`.

    Raises:
        InvalidJob: any row is invalid, e.g. of an unknown type (nothing is inserted then).
    """
    return dispatching.submit_many(app or current(), jobs, session=session)


def get(id: int, columns: Iterable[str] | None = None, *, app: App | None = None) -> dict | None:
    """Return row `id` as a dict (`columns` only, when given), or None.

    Columns come as stored: `payload` and `result_payload` are JSON text (decode them
    with `json.loads`, or use `cronjobs.Job.from_row(row)`), times are naive UTC.

    Raises:
        InvalidJob: an unknown column name.
    """
    app = app or current()
    return run_in_transaction(app.engine, lambda conn: store.get_job(conn, id, columns))


def wait(id: int, timeout: float | None = 30, *, app: App | None = None) -> Result:
    """Wait until row `id` is final (completed, failed, cancelled, expired) and return its
    outcome; at once when it is final already. A row that will be retried is not final.

    Reads the row with a short poll that backs off (50 ms doubling to 1 s), so a row that
    ends while waited for is seen within about a second, without a tight loop.

    Args:
        id: the row id.
        timeout: seconds to wait at most (default 30; 0 reads once; None waits for ever).

    Returns:
        A `Result`: `status`, `result` (the stored result decoded from JSON), `error`,
        `finished_at` (aware UTC) and `id`.

    Raises:
        JobNotFound: no row `id`.
        TimeoutError: not final after `timeout` seconds; the message names the row and
            the status last seen (`job 7 is still running after waiting 5 s`).
        InvalidJob: a bad `timeout` (negative, NaN, over a year; any real number such as
            `Decimal("0.2")` is accepted), or an `id` that is not an int from 1 to
            2**63 - 1 (`1.9`, `True`, `"7"` and None are refused).
    """
    id = waiting.check_id(id)
    return waiting.wait((app or current()).engine, id, timeout)


def children(id: int, columns: Iterable[str] | None = None, *, status: str | None = None,
             app: App | None = None) -> list[dict]:
    """The rows whose parent is row `id`, lowest id first, as dicts like `get`'s (`columns`
    only, when given; `payload` and `result_payload` as stored JSON text, times naive
    UTC). Grandchildren are not included: their parent is a child (`family` counts them).

    Args:
        id: the parent row's id.
        columns: column names (default all; pass a few for a large family).
        status: rows of this status only (`pending` ... `cancelled`).

    Returns:
        The children (empty when the row has none).

    Raises:
        JobNotFound: no row `id`.
        InvalidJob: an unknown column name or status.
    """
    if status is not None and status not in tuple(Status):
        raise InvalidJob(f"status must be one of {', '.join(Status)}, got {status!r}")
    app = app or current()

    def read(conn) -> list[dict] | None:
        if store.get_job(conn, id, ["id"]) is None:
            return None
        return store.get_children(conn, id, columns, status)

    rows = run_in_transaction(app.engine, read)
    if rows is None:
        raise JobNotFound(f"no job with id {id}")
    return rows


def family(id: int, *, app: App | None = None) -> Family | None:
    """The family of row `id` as it is now (`cronjobs.family.view.Family`: counts per
    status and reason, times and duration, failures grouped, rate and ETA, completions
    and callback rows), or None when there is no row `id`, as `get`.

    A row under a root (or a root's callback row) gives its root's family; the root of a
    row without children is a family of its own with no rows under it.
    """
    app = app or current()
    now = app.clock.now()
    return run_in_transaction(app.engine, lambda conn: read_family(conn, id, now))


def process(job_row: int | dict, *, app: App | None = None) -> bool:
    """Run a row here and now, bypassing the worker; True when it ended `completed`.

    Args:
        job_row: a row id, or a row dict: a `running` row this process claimed is run
            as it is; a `pending` one is claimed first.

    Raises:
        JobNotFound: no such row.
        JobStateError: the row is neither pending nor a claimed running row.
    """
    from .job.executor import Executor  # lazy: CLI start-up time (`get` runs no handler)
    from .job.inline import InlineRunner

    runner = InlineRunner(Executor(app or current()))
    if isinstance(job_row, dict) and job_row.get("status") == Status.RUNNING:
        return runner.run_claimed(job_row).status == Status.COMPLETED
    job_id = job_row["id"] if isinstance(job_row, dict) else int(job_row)
    return runner.run_id(job_id).status == Status.COMPLETED


def recover_stale(minutes: float | None = None, *, app: App | None = None) -> int:
    """Put `running` rows whose lease ran out more than `minutes` ago back to work.

    Rows with attempts left become `pending` (and are sent to the broker again); rows
    without become `failed`. An open ping row (`POST /api/ping/<task>/start` without its
    end) of a task that runs here ends `failed` once its MAX_RUNTIME plus `minutes` passed
    (`store.pingruns.end_overdue_pings`). Returns how many rows were changed.
    """
    app = app or current()
    minutes = app.settings.recover_stale_minutes if minutes is None else minutes
    if not 0 <= minutes <= 1e9:  # also refuses NaN and infinity (timedelta overflow)
        raise InvalidJob(f"minutes must be between 0 and 1e9, got {minutes!r}")
    now = app.clock.now()

    overdue = {t: float(c.MAX_RUNTIME) + minutes * 60 for t in app.handlers.tasks().values()
               if (c := app.resolve(t)) is not None}

    def rescue(conn) -> tuple[list[dict], list[tuple[int, str]], list[int]]:
        changed = store.rescue_stale(conn, now, minutes, mark=failures.fingerprint)
        pings = end_overdue_pings(conn, overdue, now)
        # a row that ended failed is a finish: the rows waiting for it, its family
        return changed, settle_rows(conn, app, changed, now), pings

    changed, released, pings = run_in_transaction(app.engine, rescue)
    for job_id in pings:
        log.warning("recover-stale: ping row %s (start without an end) -> failed", job_id)
    for row in changed:
        log.warning("recover-stale: job %s -> %s", row["id"], row["status"],
                    extra={"trace_id": row["id"]})
        if row["status"] == Status.PENDING:
            dispatching.send(app, row["id"], row["queue"])
    for job_id, queue in released:
        dispatching.send(app, job_id, queue)
    return len(changed) + len(pings)


def cleanup(retention: dict | None = None, *, dry_run: bool = False,
            progress: Callable[[dict[str, int]], None] | None = None,
            app: App | None = None) -> dict[str, int]:
    """Delete old finished rows in bounded batches; return counts per status.

    Args:
        retention: days per status, e.g. `{"completed": 7, "failed": 30, "cancelled": 7}`
            (missing keys use the settings). Completed rows keep their idempotency keys
            taken until they are deleted.
        dry_run: count what a cleanup would delete now (every batch, parents after their
            children: `store.count_prunable`), delete nothing.
        progress: called after each batch (one transaction of at most
            `cleanup_batch_size` rows per status) with the counts so far, a new dict
            `{"completed": n, "failed": n, "cancelled": n}` (`cronjobs cleanup` draws its
            progress bar with it). What it raises ends the cleanup; the batches done stay
            deleted.

    Returns:
        Rows deleted (or, with `dry_run`, that would be) per status.

    Raises:
        InvalidJob: a bad `retention`.
    """
    app = app or current()
    s = app.settings
    days = {"completed": s.retention_completed_days, "failed": s.retention_failed_days,
            "cancelled": s.retention_cancelled_days}
    for key, value in (retention or {}).items():
        if key not in days or not isinstance(value, (int, float)) or value < 0:
            raise InvalidJob(f"retention must map completed/failed/cancelled to days >= 0, "
                             f"got {key!r}: {value!r}")
        days[key] = value
    totals = {"completed": 0, "failed": 0, "cancelled": 0}
    while True:
        now = app.clock.now()
        counts = run_in_transaction(app.engine, lambda c, now=now: store.prune(
            c, now, completed_days=days["completed"], failed_days=days["failed"],
            cancelled_days=days["cancelled"], batch=s.cleanup_batch_size, dry_run=dry_run))
        for key, value in counts.items():
            totals[key] += value
        if progress is not None:
            progress(dict(totals))
        if dry_run or not any(counts.values()):
            break
    if not dry_run:
        now = app.clock.now()
        run_in_transaction(app.engine, lambda c: store.prune_slots(c, now))
        # Heartbeats of workers that were killed (a clean stop removes its own).
        run_in_transaction(app.engine, lambda c: store.prune_workers(c, 24 * 3600))
    return totals
