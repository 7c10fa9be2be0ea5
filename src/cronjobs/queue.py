"""The public queue API: dispatch, submit, dispatch_many, get, process, recover_stale, cleanup.

The CLI and the dashboard call these same functions. Every function takes an optional
`app=` (default: `cronjobs.app.current()`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import limits, store
from .app import App, current
from .clock import as_utc
from .db import run_in_transaction
from .errors import InvalidJob

log = logging.getLogger("cronjobs.queue")

_SESSION_KEY = "cronjobs_pending_sends"
_LISTENING = "cronjobs_listening"


@dataclass(frozen=True)
class Dispatched:
    """The answer of `submit()`.

    Attributes:
        id: the row id (new or existing).
        created: True when this call inserted the row.
        status: the row's status (`pending` for a new row).
        payload_matches: False when the key's existing row holds a different payload.
    """

    id: int
    created: bool
    status: str
    payload_matches: bool


def dispatch(type: str, payload: dict | None = None, *, idempotency_key: str | None = None,
             parent_id: int | None = None, priority: int = 5,
             scheduled_at: datetime | None = None, title: str | None = None,
             max_attempts: int | None = None, queue: str | None = None,
             session: Session | None = None, app: App | None = None) -> int:
    """Add a job row and send its id to the broker; return the row id.

    Args:
        type: the job type (`acme.quotasync.execute`).
        payload: JSON-serialisable dict handed to `handle()`.
        idempotency_key: unique over the whole table; when taken, the existing row's id
            is returned and nothing is inserted (so a positive id is no proof of a new row).
        parent_id: id of the parent row (deleting the parent deletes this row).
        priority: lower runs first (default 5).
        scheduled_at: do not run before this instant (aware, or naive UTC); None = now.
        title: up to 255 characters, shown in the dashboard.
        max_attempts: overrides the handler's MAX_ATTEMPTS for this row (>= 1).
        queue: broker queue (default: the handler's QUEUE, else the default queue).
        session: the caller's SQLAlchemy Session: the row is written in its transaction
            and the message is sent only after it commits (nothing on rollback).

    Returns:
        The id of the new row, or of the row that already holds `idempotency_key`.

    Raises:
        InvalidJob: bad argument, with a one-line reason naming it: payload not a JSON
            object, over 1,000,000 bytes of JSON or nested over 100 levels, type over 160
            characters, queue over 64 or with characters outside `[A-Za-z0-9_.-]`, key
            over 191, title over 255 (limits: `cronjobs.limits`), parent missing, ...
        DatabaseUnavailable: the database cannot be reached.
    """
    return submit(type, payload, idempotency_key=idempotency_key, parent_id=parent_id,
                  priority=priority, scheduled_at=scheduled_at, title=title,
                  max_attempts=max_attempts, queue=queue, session=session, app=app).id


def submit(type: str, payload: dict | None = None, *, idempotency_key: str | None = None,
           parent_id: int | None = None, priority: int = 5,
           scheduled_at: datetime | None = None, title: str | None = None,
           max_attempts: int | None = None, queue: str | None = None,
           session: Session | None = None, app: App | None = None) -> Dispatched:
    """Like `dispatch()`, but tell new work from an existing row: returns `Dispatched`."""
    app = app or current()
    values = build_row(app, type, payload, idempotency_key=idempotency_key,
                       parent_id=parent_id, priority=priority, scheduled_at=scheduled_at,
                       title=title, max_attempts=max_attempts, queue=queue)
    if session is not None:
        row, created = _insert(session.connection(), values)
        if created:
            _send_after_commit(session, app, row["id"], values)
    else:
        row, created = run_in_transaction(app.engine, lambda conn: _insert(conn, values))
        if created:
            _send(app, row["id"], values)
    return Dispatched(row["id"], created, row["status"], row["payload"] == values["payload"])


def dispatch_many(jobs: Iterable[dict], *, session: Session | None = None,
                  app: App | None = None) -> list[int]:
    """Insert many rows in one round trip; return their ids in input order. The broker
    gets at most 16 messages per queue for the rows that are due now (messages wake
    workers; they claim rows, not message ids) and one per row scheduled for later.

    Args:
        jobs: dicts with the keyword arguments of `dispatch` (`type` required).
            When any row has an `idempotency_key`, the rows are inserted one by one (in
            the same single transaction), so a taken key gives the existing id as
            `dispatch` does.
        session: as in `dispatch`.

    Raises:
        InvalidJob: any row is invalid (nothing is inserted then).
    """
    app = app or current()
    specs = [dict(j) for j in jobs]
    rows = []
    for spec in specs:
        if "type" not in spec:
            raise InvalidJob(f"dispatch_many: every job needs a 'type', got {spec!r}")
        rows.append(build_row(app, spec.pop("type"), spec.pop("payload", None), **spec))
    keyed = any(r["idempotency_key"] for r in rows)

    def insert(conn) -> list[int]:
        if keyed:  # one by one (a taken key gives its holder's id), one transaction
            return [_insert(conn, r)[0]["id"] for r in rows]
        try:
            return store.insert_jobs(conn, rows)
        except IntegrityError as exc:
            raise InvalidJob(f"dispatch_many refused by the database: {exc.orig}") from None

    if session is not None:
        ids = insert(session.connection())
        for job_id, values in _doorbells(ids, rows):
            _send_after_commit(session, app, job_id, values)
        return ids
    ids = run_in_transaction(app.engine, insert)
    for job_id, values in _doorbells(ids, rows):
        _send(app, job_id, values)
    return ids


DOORBELLS_PER_QUEUE = 16


def _doorbells(ids: list[int], rows: list[dict]) -> list[tuple[int, dict]]:
    """The messages a batch needs: a message rings its queue (a worker's producer then
    claims rows for all its idle slots and goes on while batches come back full), so a
    batch sends at most `DOORBELLS_PER_QUEUE` messages per queue — enough to wake that
    many idle workers — and one per row that is due later (its own delay)."""
    sent: dict[str, int] = {}
    bells = []
    for job_id, values in zip(ids, rows, strict=True):
        if values["scheduled_at"] is not None:
            bells.append((job_id, values))
            continue
        count = sent.get(values["queue"], 0)
        if count < DOORBELLS_PER_QUEUE:
            sent[values["queue"]] = count + 1
            bells.append((job_id, values))
    return bells


def build_row(app: App, type: str, payload: dict | None, *, idempotency_key: str | None = None,
              parent_id: int | None = None, priority: int = 5,
              scheduled_at: datetime | None = None, title: str | None = None,
              max_attempts: int | None = None, queue: str | None = None) -> dict:
    """Validate dispatch arguments and return the column values of a new row.

    Raises:
        InvalidJob: naming the bad argument and its value.
    """
    limits.check_name(type, "job type", limits.TYPE_MAX_CHARS)
    payload = {} if payload is None else payload
    if not isinstance(payload, dict):
        raise InvalidJob(f"payload must be a JSON object (dict), got "
                         f"{payload.__class__.__name__}: {payload!r:.80}")
    limits.check_json_depth(payload, "payload")
    try:
        payload_json = json.dumps(payload, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"payload is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidJob("payload is not JSON-serialisable: nested too deeply") from None
    limits.check_json_size(payload_json, "payload", limits.PAYLOAD_MAX_BYTES)
    if title is not None:
        limits.check_name(title, "title", limits.TITLE_MAX_CHARS, allow_empty=True)
    if idempotency_key is not None:
        limits.check_name(idempotency_key, "idempotency key", limits.KEY_MAX_CHARS)
    if queue is not None:
        limits.check_queue(queue)
    if (not isinstance(priority, int) or isinstance(priority, bool)
            or not -2**31 <= priority < 2**31):
        raise InvalidJob(f"priority must be an integer from -2**31 to 2**31-1, got {priority!r}")
    cls = app.resolve(type)
    if max_attempts is None:
        max_attempts = int(cls.MAX_ATTEMPTS) if cls is not None else 3
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
        raise InvalidJob(f"max attempts must be an integer >= 1, got {max_attempts!r}")
    if parent_id is not None and (not isinstance(parent_id, int) or not 1 <= parent_id < 2**63):
        raise InvalidJob(f"parent id must be a positive integer, got {parent_id!r}")
    if scheduled_at is not None and not isinstance(scheduled_at, datetime):
        raise InvalidJob(f"scheduled_at must be a datetime, got {scheduled_at!r}")
    now = app.clock.now()
    return {"type": type, "queue": queue or app.queue_of(type), "status": "pending",
            "priority": priority, "payload": payload_json, "attempts": 0,
            "max_attempts": max_attempts, "idempotency_key": idempotency_key,
            "parent_id": parent_id, "title": title,
            "scheduled_at": as_utc(scheduled_at) if scheduled_at else None,
            "created_at": now, "updated_at": now}


def _insert(conn, values: dict) -> tuple[dict, bool]:
    try:
        return store.insert_job(conn, values)
    except IntegrityError as exc:
        if values["parent_id"] is not None:
            raise InvalidJob(f"parent job {values['parent_id']} does not exist") from None
        raise InvalidJob(f"the database refused the job: {exc.orig}") from None


def _delay(app: App, values: dict) -> float:
    if values["scheduled_at"] is None:
        return 0.0
    return max(0.0, (values["scheduled_at"] - app.clock.now()).total_seconds())


def _send(app: App, job_id: int, values: dict) -> None:
    app.send(job_id, values["queue"], _delay(app, values))


def _send_after_commit(session: Session, app: App, job_id: int, values: dict) -> None:
    pending = session.info.setdefault(_SESSION_KEY, [])
    pending.append((app, job_id, values))
    if session.info.get(_LISTENING):
        return
    session.info[_LISTENING] = True

    def after_commit(sess: Session) -> None:
        for app_, id_, values_ in sess.info.pop(_SESSION_KEY, []):
            _send(app_, id_, values_)

    def after_rollback(sess: Session) -> None:
        sess.info.pop(_SESSION_KEY, None)

    # Listeners stay for the session's life (removing them inside the event is unsafe).
    event.listen(session, "after_commit", after_commit)
    event.listen(session, "after_rollback", after_rollback)


def get(id: int, columns: Iterable[str] | None = None, *, app: App | None = None) -> dict | None:
    """Return row `id` as a dict (`columns` only, when given), or None.

    Columns come as stored: `payload` and `result_payload` are JSON text (decode them
    with `json.loads`, or use `cronjobs.Job.from_row(row)`), times are naive UTC.

    Raises:
        InvalidJob: an unknown column name.
    """
    app = app or current()
    return run_in_transaction(app.engine, lambda conn: store.get_job(conn, id, columns))


def process(job_row: int | dict, *, app: App | None = None) -> bool:
    """Run a row here and now, bypassing the worker; True when it ended `completed`.

    Args:
        job_row: a row id, or a row dict: a `running` row this process claimed is run
            as it is; a `pending` one is claimed first.

    Raises:
        JobNotFound: no such row.
        JobStateError: the row is neither pending nor a claimed running row.
    """
    app = app or current()
    if isinstance(job_row, dict) and job_row.get("status") == "running":
        return app.executor.run_claimed(job_row).status == "completed"
    job_id = job_row["id"] if isinstance(job_row, dict) else int(job_row)
    return app.executor.run_id(job_id).status == "completed"


def recover_stale(minutes: float | None = None, *, app: App | None = None) -> int:
    """Put `running` rows whose lease ran out more than `minutes` ago back to work.

    Rows with attempts left become `pending` (and are sent to the broker again); rows
    without become `failed`. Returns how many rows were changed.
    """
    app = app or current()
    minutes = app.settings.recover_stale_minutes if minutes is None else minutes
    if not 0 <= minutes <= 1e9:  # also refuses NaN and infinity (timedelta overflow)
        raise InvalidJob(f"minutes must be between 0 and 1e9, got {minutes!r}")
    now = app.clock.now()
    changed = run_in_transaction(app.engine, lambda c: store.rescue_stale(c, now, minutes))
    for row in changed:
        log.warning("recover-stale: job %s -> %s", row["id"], row["status"],
                    extra={"trace_id": row["id"]})
        if row["status"] == "pending":
            app.send(row["id"], row["queue"])
    return len(changed)


def cleanup(retention: dict | None = None, *, dry_run: bool = False,
            app: App | None = None) -> dict[str, int]:
    """Delete old finished rows in bounded batches; return counts per status.

    Args:
        retention: days per status, e.g. `{"completed": 7, "failed": 30, "cancelled": 7}`
            (missing keys use the settings). Completed rows keep their idempotency keys
            taken until they are deleted.
        dry_run: count what would be deleted (the first batch per status), delete nothing.
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
        if dry_run or not any(counts.values()):
            break
    if not dry_run:
        now = app.clock.now()
        run_in_transaction(app.engine, lambda c: store.prune_slots(c, now))
        # Heartbeats of workers that were killed (a clean stop removes its own).
        run_in_transaction(app.engine, lambda c: store.prune_workers(c, 24 * 3600))
    return totals
