"""Dispatching: check a new job, insert its row, ring its queue once the row is committed.

Every new row is made here: the public API (`cronjobs.queue.dispatch`,
`submit`, `dispatch_many`), a running handler's children (`JobContext.dispatch_child`),
the scheduler's slots and manual runs. So the rules live in one place:

- `build_row` (`job.rows`) checks every argument (limits from `cronjobs.limits`) and the
  type: a type no handler of this process is registered for is refused (`InvalidJob`,
  with a "did you mean" hint), unless the caller says `known_type=False` or the type
  matches a pattern of `CRONJOBS_REMOTE_TYPES` (a type that only another codebase's
  workers run). It computes the derived columns of a row (its queue). What the handler
  that runs the row decides is left unset: `max_attempts` (unless the caller gives it) is
  set at claim time by the claiming worker (`store.claim_jobs`), as is the lease.
- `insert_row` inserts one row under the idempotency-key rules (a taken key gives the
  holder's row); `insert_rows` many, in one statement when no row has a key.
- The broker hears of a row only after its transaction committed (`send`,
  `send_after_commit` for a caller's Session), and a batch rings each queue at most
  `DOORBELLS_PER_QUEUE` times (`doorbells`). A failed send is logged, never raised: the
  row is the truth, and the worker's sweep rings its queue again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from .. import limits, store
from ..app import App
from ..errors import InvalidCallbackUrl, InvalidJob
from ..family import depends, unrun
from ..status import Reason, Status
from ..store.db import run_in_transaction
from .rows import build_row as build_row
from .rows import check_type as check_type
from .rows import is_remote as is_remote
from .rows import limit_key_of as limit_key_of

if TYPE_CHECKING:  # a caller that passes a Session has imported the ORM already
    from sqlalchemy.orm import Session

log = logging.getLogger("cronjobs.queue")

DOORBELLS_PER_QUEUE = 16
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


def submit(app: App, type: str, payload: dict | None = None, *,
           session: Session | None = None, **options: Any) -> Dispatched:
    """Insert one job row and ring its queue after the commit (see `queue.submit`).

    Args:
        app: the App whose database and broker are used.
        type, payload: the job.
        session: the caller's Session: the row is written in its transaction and the
            message waits for its commit (nothing is sent on rollback).
        options: the keyword arguments of `build_row`, and `depends_on` (row ids: the
            new row waits until they have finished, `family.depends`) with
            `allow_failed` (a failed or cancelled dependency does not cancel it).

    Raises:
        InvalidJob: see `build_row`; a missing parent; a missing dependency or a cycle.
    """
    after = depends.check_ids(options.pop("depends_on", None))
    allow_failed = _allow_failed(options.pop("allow_failed", False))
    values = build_row(app, type, payload, **options)
    if values["parent_id"] is not None and options.get("root_id") is None:
        _join_family(app, [values], session)
    if after:
        return _submit_after(app, values, after, allow_failed, session)
    if session is not None:
        row, created = insert_row(session.connection(), values)
        if created:
            send_after_commit(session, app, row["id"], values["queue"], values["scheduled_at"])
    else:
        # One statement (and a read when the key is taken): it commits itself. SQLite's
        # new row goes straight to the driver; a taken key or an error takes the general path.
        row, taken = store.insert_new_direct(app.engine, values)
        created = row is not None
        if row is None:
            row, created = run_in_transaction(
                app.autocommit_engine, lambda conn: insert_row(conn, values, taken=taken))
        if created:
            send(app, row["id"], values["queue"], delay(app, values["scheduled_at"]))
    return Dispatched(row["id"], created, row["status"], row["payload"] == values["payload"])


def _allow_failed(value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidJob(f"allow_failed must be True or False, got {value!r:.80}")
    return value


def admitted(app: App, conn, values: dict, after: list[int], allow_failed: bool) -> dict:
    """The values of a new row with dependencies `after` (its first status decided by
    `depends.admit`, which locks them in the caller's transaction: call it right before
    the insert)."""
    admission = depends.admit(conn, after, root_id=values["root_id"], allow_failed=allow_failed)
    values = dict(values, status=admission.status)
    if admission.status == Status.CANCELLED:
        now = app.clock.now()
        values.update(finished_at=now, error=admission.error,
                      outcome_reason=Reason.DEPENDENCY_FAILED,
                      process_logs=limits.log_line(f"[{now:%Y-%m-%d %H:%M:%S}] "
                                                   f"{admission.error}: not run") + "\n")
    return values


def _insert_after(app: App, conn, values: dict, after: list[int],
                  allow_failed: bool) -> tuple[dict, bool, dict]:
    values = admitted(app, conn, values, after, allow_failed)
    row, created = insert_row(conn, values)
    if created:
        depends.record(conn, row["id"], after, allow_failed)
    if created and values["status"] == Status.CANCELLED:  # ended at once, not run: its webhook
        unrun.insert_deliveries(conn, app, [{
            "id": row["id"], "type": values["type"], "callback_url": values.get("callback_url"),
            "attempts": values.get("attempts") or 0, "max_attempts": values.get("max_attempts"),
            "error": values.get("error"), "outcome_reason": values.get("outcome_reason"),
            "status": Status.CANCELLED}], values["finished_at"])
    return row, created, values


def _submit_after(app: App, values: dict, after: list[int], allow_failed: bool,
                  session: Session | None) -> Dispatched:
    """`submit` of a row with dependencies: locked, checked and inserted with them in one
    transaction; rung only when it starts `pending`."""
    if session is not None:
        row, created, values = _insert_after(app, session.connection(), values, after,
                                             allow_failed)
        if created and values["status"] == Status.PENDING:
            send_after_commit(session, app, row["id"], values["queue"], values["scheduled_at"])
    else:
        row, created, values = run_in_transaction(
            app.engine, lambda conn: _insert_after(app, conn, values, after, allow_failed))
        if created and values["status"] == Status.PENDING:
            send(app, row["id"], values["queue"], delay(app, values["scheduled_at"]))
    return Dispatched(row["id"], created, row["status"], row["payload"] == values["payload"])


def submit_many(app: App, jobs: Iterable[dict], *, session: Session | None = None) -> list[int]:
    """Insert many rows in one transaction and ring their queues (see `queue.dispatch_many`).

    Args:
        jobs: dicts with `type` and the keyword arguments of `build_row`.

    Raises:
        InvalidJob: any row is invalid (nothing is inserted then).
    """
    rows: list[dict] = []
    afters: list[tuple[list[int], bool]] = []
    outside: list[dict] = []  # rows with a parent whose family root is to be read
    for index, spec in enumerate(dict(j) for j in jobs):
        if "type" not in spec:
            raise InvalidJob(f"dispatch_many: every job needs a 'type', got {spec!r:.200}")
        afters.append((depends.check_ids(spec.pop("depends_on", None)),
                       _allow_failed(spec.pop("allow_failed", False))))
        try:
            rows.append(build_row(app, spec.pop("type"), spec.pop("payload", None), **spec))
        except InvalidCallbackUrl as exc:  # which row of many: `jobs[3]: callback_url ...`
            raise InvalidCallbackUrl(f"jobs[{index}]: {exc}") from None
        if rows[-1]["parent_id"] is not None and spec.get("root_id") is None:
            outside.append(rows[-1])
    _join_family(app, outside, session)
    if any(after for after, _ in afters):
        return _submit_many_after(app, rows, afters, session)
    if session is not None:
        ids = insert_rows(session.connection(), rows)
        for job_id, values in doorbells(ids, rows):
            send_after_commit(session, app, job_id, values["queue"], values["scheduled_at"])
        return ids
    ids = run_in_transaction(app.engine, lambda conn: insert_rows(conn, rows))
    for job_id, values in doorbells(ids, rows):
        send(app, job_id, values["queue"], delay(app, values["scheduled_at"]), wait=True)
    return ids


def _join_family(app: App, rows: list[dict], session: Session | None) -> None:
    """Set `root_id` of rows dispatched with a parent from outside a handler to the
    parent's family root (its `root_id`, or the parent itself when it has none), read
    from the database: a child of a child belongs to the first row's family."""
    parents = sorted({r["parent_id"] for r in rows})
    if not parents:
        return
    if session is not None:
        roots = store.family_roots(session.connection(), parents)
    else:
        with app.engine.connect() as conn:
            roots = store.family_roots(conn, parents)
    for row in rows:
        row["root_id"] = roots.get(row["parent_id"], row["parent_id"])


def _submit_many_after(app: App, rows: list[dict], afters: list[tuple[list[int], bool]],
                       session: Session | None) -> list[int]:
    """`submit_many` when rows have dependencies: one row at a time, in one transaction."""
    def write(conn) -> list[tuple[int, dict]]:
        done = []
        for values, (after, allow_failed) in zip(rows, afters, strict=True):
            if after:
                row, _, values = _insert_after(app, conn, values, after, allow_failed)
            else:
                row, _ = insert_row(conn, values)
            done.append((row["id"], values))
        return done

    done = write(session.connection()) if session is not None else run_in_transaction(
        app.engine, write)
    bells = [(i, v) for i, v in done if v["status"] == Status.PENDING]
    for job_id, values in doorbells([i for i, _ in bells], [v for _, v in bells]):
        if session is not None:
            send_after_commit(session, app, job_id, values["queue"], values["scheduled_at"])
        else:
            send(app, job_id, values["queue"], delay(app, values["scheduled_at"]), wait=True)
    return [i for i, _ in done]


def insert_row(conn, values: dict, *, taken: bool = False) -> tuple[dict, bool]:
    """Insert one row (`build_row`'s values) in the caller's transaction, or find the row
    that holds its idempotency key (read first when `taken`: see `store.insert_job`).

    Returns:
        `(row, created)`: `row` has `id`, `status`, `payload`; `created` is False when the
        key was taken (see `store.insert_job` for concurrent inserters).

    Raises:
        InvalidJob: a missing parent, or another constraint the database refused.
    """
    try:
        return store.insert_job(conn, values, taken=taken)
    except IntegrityError as exc:
        if values["parent_id"] is not None:
            raise InvalidJob(f"parent job {values['parent_id']} does not exist") from None
        raise InvalidJob(f"the database refused the job: {exc.orig}") from None


def insert_rows(conn, rows: list[dict]) -> list[int]:
    """Insert many rows in the caller's transaction; their ids in input order. When any row
    has an idempotency key they are inserted one by one (a taken key gives its holder's
    id), else in one statement.

    Raises:
        InvalidJob: a row the database refused (the caller's transaction keeps none).
    """
    if any(r["idempotency_key"] for r in rows):
        return [insert_row(conn, r)[0]["id"] for r in rows]
    try:
        return store.insert_jobs(conn, rows)
    except IntegrityError as exc:
        raise InvalidJob(f"dispatch_many refused by the database: {exc.orig}") from None


def insert_batch(conn, rows: list[dict]) -> list[int]:
    """Insert rows in one statement, keys or not (the scheduler's slots, whose keys its
    slot claims decided); their ids in input order.

    Raises:
        IntegrityError: a key was taken after all, or a parent is missing.
    """
    return store.insert_jobs(conn, rows)


def doorbells(ids: list[int], rows: list[dict]) -> list[tuple[int, dict]]:
    """The messages a batch needs: a message rings its queue (a worker's loop then claims
    rows for all its idle slots and goes on while batches come back full), so a batch
    sends at most `DOORBELLS_PER_QUEUE` messages per queue — enough to wake that many idle
    workers — and one per row that is due later (its own delay)."""
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


def send(app: App, job_id: int, queue: str, delay_seconds: float = 0, *,
         wait: bool = False) -> None:
    """Ring `queue` for row `job_id` (its transaction has committed): `Broker.ring`, in
    the background for a network broker, or `Broker.send` before returning when `wait`
    (a batch's few doorbells, already at most 16 per queue). A failure is logged, not
    raised: the row is the truth, and the sweep rings its queue again."""
    try:
        (app.broker.send if wait else app.broker.ring)(job_id, queue, delay_seconds)
    except Exception as exc:  # the row is the truth; the sweep will resend it
        log.warning("could not send job %s to queue %s (%s); the sweep will resend it",
                    job_id, queue, exc)


def send_after_commit(session: Session, app: App, job_id: int, queue: str,
                      scheduled_at: datetime | None = None) -> None:
    """`send` once `session` commits (delayed until `scheduled_at`, naive UTC, if given);
    nothing when it rolls back."""
    pending = session.info.setdefault(_SESSION_KEY, [])
    pending.append((app, job_id, queue, scheduled_at))
    if session.info.get(_LISTENING):
        return
    session.info[_LISTENING] = True

    def after_commit(sess: Session) -> None:
        for app_, id_, queue_, at in sess.info.pop(_SESSION_KEY, []):
            send(app_, id_, queue_, delay(app_, at))

    def after_rollback(sess: Session) -> None:
        sess.info.pop(_SESSION_KEY, None)

    # Listeners stay for the session's life (removing them inside the event is unsafe).
    event.listen(session, "after_commit", after_commit)
    event.listen(session, "after_rollback", after_rollback)


def delay(app: App, scheduled_at: datetime | None) -> float:
    """Seconds from the App's clock until `scheduled_at` (naive UTC); 0 for None or past."""
    if scheduled_at is None:
        return 0.0
    return max(0.0, (scheduled_at - app.clock.now()).total_seconds())
