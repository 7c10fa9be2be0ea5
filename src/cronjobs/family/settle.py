"""A family's completion, decided in the transaction that finishes its last row.

Every path that finishes rows (the outcome writer of workers and `cronjobs run`, an
operator's cancel, recover-stale) calls `after_finish` in its own transaction, after
writing: the rows waiting for them (`depends`), then their families (`settle`).
For each family touched it decides, without polling and without making the root a row
every finishing child locks (see `cronjobs.store.families` for the three statements and
why they suffice):

- a free running row of the family is left (locked as a witness): the family goes on;
- else, the root locked: the root has finished and no row under it is pending or
  running: the family is **complete**. Its completion is recorded (`cronjob_family`,
  generation n+1), its callback rows are inserted (idempotency key
  `family:<root>:<generation>:<kind>`: a race can only find the row there already), the
  task whose run it is takes the family's outcome as its last status and success.

A root that finishes without children completes at once (in the same call), when that
matters: its handler has callbacks, or it is a task's run.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from ..app import App
from ..handler import callback_kinds, callback_type
from ..schedule.expect import AUTO_PAUSE_BY, auto_pause_of, auto_pause_reason
from ..status import FINAL, Reason, Status
from ..store import families as rows
from ..store.flow import is_task_paused, pause
from ..store.insert import insert_job
from ..store.runtime import update_task_status
from . import depends, unrun

log = logging.getLogger("cronjobs.family")

KEY_PREFIX = "family:"
SUCCESS, FAILURE, CANCELLED = "success", "failure", "cancelled"


@dataclass(frozen=True)
class Finished:
    """A row this transaction finished (completed, failed, cancelled or deleted).

    Attributes:
        id: the row's id.
        type: its job type.
        root_id: its family's root (None: the row has no parent).
        key: its idempotency key (a callback row's starts with `family:`).
        task_run: the row is a task's scheduled or manual run.
        callbacks: whether its type's handler has family callbacks, when the caller
            knows (the claim resolved it); None: resolved here if needed.
    """

    id: int
    type: str
    root_id: int | None
    key: str | None = None
    task_run: bool = False
    callbacks: bool | None = None


Ring = tuple[int, str]  # a row made pending by a completion, `(id, queue)`: rung after the commit
MAX_ROUNDS = 16  # families completed by rows cancelled by completions, and so on


def is_callback(key: str | None) -> bool:
    """True for a callback row's idempotency key."""
    return bool(key) and key.startswith(KEY_PREFIX)


def settle(conn: Connection, app: App, finished: list[Finished], now: datetime, *,
           parents: set[int] | None = None, held: set[int] | None = None) -> list[Ring]:
    """Decide, for each family `finished` rows belong to, whether it is complete now, in
    the caller's transaction (after it wrote those rows' ends); complete ones are recorded,
    start their callbacks and release the rows waiting for them (`depends`); rows those
    cancel (a failed dependency) are settled in turn.

    Args:
        conn: the transaction that finished the rows.
        app: resolves the root handlers (callbacks, MIN_SUCCESS_RATIO, queues).
        finished: the rows it finished.
        now: the clock's time (naive UTC), written as the completion's time.
        parents: of the parentless `finished` rows, those that have children, when the
            caller read it already (`store.families.links`); None: read here.
        held: families left to a row the finishing worker still runs (`after_finish`).

    Returns:
        The rows made pending (callbacks, released dependents): ring them after the commit.
    """
    ring: list[Ring] = []
    for _ in range(MAX_ROUNDS):
        if not finished:
            break
        started, cancelled = _settle_once(conn, app, finished, now, parents, held or set())
        ring += started
        finished, parents, held = [Finished(i, "", root) for i, root in cancelled], None, None
    return ring


def _settle_once(conn: Connection, app: App, finished: list[Finished], now: datetime,
                 parents: set[int] | None,
                 held: set[int]) -> tuple[list[Ring], list[tuple[int, int | None]]]:
    own = {f.id for f in finished}
    families: set[int] = {f.root_id for f in finished if f.root_id is not None}
    roots = [f for f in finished if f.root_id is None and not is_callback(f.key)]
    alone: list[int] = []
    if roots:
        if parents is None:
            parents = rows.roots_with_children(conn, [f.id for f in roots])
        for f in roots:
            if f.id in parents:
                families.add(f.id)
            elif f.task_run or (f.callbacks if f.callbacks is not None
                                else _has_callbacks(app, f.type)):
                alone.append(f.id)
    started: list[Ring] = []
    cancelled: list[tuple[int, int | None]] = []
    for root_id in sorted((families | set(alone)) - held):
        if root_id not in alone and rows.running_witness(conn, root_id, own) is not None:
            continue
        root = rows.lock_root(conn, root_id)
        if root is None or root["status"] not in FINAL:
            continue
        if root_id not in alone and rows.unfinished(conn, root_id):
            continue
        outcome, callbacks = complete(conn, app, root, now)
        if outcome is None:
            continue
        waiting = depends.settle_family_dependents(conn, root_id, now, outcome)
        unrun.insert_deliveries(conn, app, waiting.ended, now)
        started += callbacks + waiting.released
        cancelled += waiting.cancelled
    return started, cancelled


def settle_rows(conn: Connection, app: App, changed: list[dict], now: datetime) -> list[Ring]:
    """`settle` for rows an operator or recover-stale changed (`store.actions
    .cancel_pending`, `store.rescue_stale`: dicts with `id`, `type`, `root_id`,
    `idempotency_key` and, where it may not be final, `status`); rows put back to
    `pending` are not finished and are left out. The rows that ended `cancelled` or
    `expired` (not run) get their webhook deliveries here (`unrun.insert_deliveries`)."""
    ended = [r for r in changed if r.get("status", Status.CANCELLED) in FINAL]
    unrun.insert_deliveries(conn, app, ended, now)  # cancelled or expired: not run
    return after_finish(conn, app, [
        (Finished(int(r["id"]), r["type"], r["root_id"], r.get("idempotency_key")),
         r.get("status", Status.CANCELLED)) for r in ended], now)


def after_finish(conn: Connection, app: App, finished: list[tuple[Finished, str]],
                 now: datetime, *, held: set[int] | None = None) -> list[Ring]:
    """What the end of rows starts, in the caller's transaction (after it wrote them):
    the rows waiting for them are released or cancelled (`depends.after_finish`), then
    their families (and those of the rows it cancelled) are settled (`settle`).

    Args:
        finished: each row finished with its final status (`completed`, `failed`,
            `cancelled`, `deleted`).
        now: naive UTC.
        held: families (root ids) the finishing worker still runs another row of: left
            to that row's end, which this worker writes after this transaction (no
            witness read, no lock).

    Returns:
        The rows made pending (released dependents, callbacks): ring them after the commit.
    """
    if not finished:
        return []
    roots = [f.id for f, _ in finished if f.root_id is None and not is_callback(f.key)]
    parents, pairs = rows.links(conn, roots, [f.id for f, _ in finished])
    waiting = depends.after_finish(conn, [(f.id, status) for f, status in finished], now,
                                   roots=roots, pairs=pairs, parents=parents)
    unrun.insert_deliveries(conn, app, waiting.ended, now)
    ring = waiting.released + settle(conn, app, [f for f, _ in finished], now,
                                     parents=parents, held=held)
    if waiting.cancelled:  # rows a failed dependency cancelled: their families too
        ring += settle(conn, app, [Finished(i, "", root) for i, root in waiting.cancelled], now)
    return ring


def _has_callbacks(app: App, job_type: str) -> bool:
    cls = app.resolve(job_type)
    return cls is not None and bool(callback_kinds(cls))


def complete(conn: Connection, app: App, root: dict,
             now: datetime) -> tuple[str | None, list[Ring]]:
    """Record the next completion of family `root` (the locked root row, as
    `store.families.lock_root` read it) and insert its callback rows; the task whose run
    it is takes the family's outcome. Returns the outcome (`success`, `failure`,
    `cancelled`; None when this completion was recorded already) and the callback rows
    inserted."""
    root_id = int(root["id"])
    generation = rows.last_generation(conn, root_id) + 1
    status_counts: Counter[str] = Counter()
    cancelled = root["outcome_reason"] == Reason.FAMILY_CANCELLED
    for status, reason, n in rows.counts(conn, root_id):
        status_counts[status] += n
        cancelled = cancelled or reason == Reason.FAMILY_CANCELLED
    cls = app.resolve(root["type"])
    outcome = _outcome(root["status"], status_counts, cancelled,
                       getattr(cls, "MIN_SUCCESS_RATIO", 1.0))
    if not rows.record_completion(conn, root_id, generation, outcome, dict(status_counts), now):
        return None, []
    if root["status"] == Status.COMPLETED:  # a task's run that ended otherwise said so
        task_run_ended(conn, app, root_id,
                       Status.COMPLETED if outcome == SUCCESS else Status.FAILED, now,
                       success=outcome == SUCCESS)
    log.info("family %s complete (generation %s): %s, %s", root_id, generation, outcome,
             json.dumps(dict(status_counts), sort_keys=True), extra={"trace_id": root_id})
    if cls is None:
        return outcome, []
    started: list[Ring] = []
    for kind in callback_kinds(cls):
        if kind == "success" and outcome != SUCCESS or kind == "failure" and outcome == SUCCESS:
            continue
        job_type = callback_type(root["type"], kind)
        queue = app.queue_of(job_type)
        values = {"type": job_type, "queue": queue, "status": Status.PENDING,
                  "limit_key": None, "priority": 5,
                  "payload": json.dumps({"family": root_id, "generation": generation}),
                  "attempts": 0, "max_attempts": None,
                  "idempotency_key": rows.callback_key(root_id, generation, kind),
                  "parent_id": root_id, "root_id": None,
                  "title": f"{kind} of family {root_id} (generation {generation})",
                  "scheduled_at": None, "created_at": now, "updated_at": now}
        row, created = insert_job(conn, values)
        if created:
            started.append((int(row["id"]), queue))
    return outcome, started


def task_run_ended(conn: Connection, app: App, job_id: int, status: str, now: datetime, *,
                   success: bool | None = None) -> None:
    """Record how a task's scheduled run `job_id` ended (`store.update_task_status`), in
    the transaction that writes that end; the failed run that brings the task's
    `failure_streak` to its `AUTO_PAUSE_AFTER_FAILURES` (N) pauses the task (scope `task`,
    reason `auto: N failures in a row`, by `cronjobs`) unless it is paused already.

    Args:
        status: the run's status (a discover's: its family's outcome, `success`);
            `now`: naive UTC.
    """
    failed = update_task_status(conn, job_id, status, now, success=success)
    if failed is None:
        return
    task, job_type, streak = failed
    limit = auto_pause_of(app.resolve(job_type), app.settings.task(task))
    if limit is None or streak < limit or is_task_paused(conn, task, now):
        return
    pause(conn, "task", task, now=now, reason=auto_pause_reason(limit), by=AUTO_PAUSE_BY)
    log.warning("task %s paused: %s failures in a row (AUTO_PAUSE_AFTER_FAILURES = %s)",
                task, streak, limit, extra={"trace_id": job_id})


def _outcome(root_status: str, status_counts: Counter, cancelled: bool, ratio: float) -> str:
    """`cancelled` (the family was cancelled), `failure` (the root did not complete, or
    too few rows under it did) or `success`."""
    if cancelled:
        return CANCELLED
    if root_status != Status.COMPLETED:
        return FAILURE
    total = sum(status_counts.values())
    if not total:
        return SUCCESS
    return SUCCESS if status_counts.get(Status.COMPLETED, 0) / total >= ratio else FAILURE
