"""A family's completion, decided in the transaction that finishes its last row.

Every path that finishes rows (the outcome writer of workers and `cronjobs run`, an
operator's cancel, recover-stale) calls `settle` in its own transaction, after writing.
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
from ..status import FINAL, Reason, Status
from ..store import families as rows
from ..store.insert import insert_job
from ..store.runtime import update_task_status

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
    """

    id: int
    type: str
    root_id: int | None
    key: str | None = None
    task_run: bool = False


@dataclass(frozen=True)
class Started:
    """A callback row a completion inserted: ring `queue` for `id` after the commit.

    Attributes:
        root_id: the family's root.
        id: the callback row.
        queue: its queue.
    """

    root_id: int
    id: int
    queue: str


def callback_key(root_id: int, generation: int, kind: str) -> str:
    """The idempotency key of callback `kind` of completion `generation` of a family."""
    return f"{KEY_PREFIX}{int(root_id)}:{int(generation)}:{kind}"


def is_callback(key: str | None) -> bool:
    """True for a callback row's idempotency key."""
    return bool(key) and key.startswith(KEY_PREFIX)


def settle(conn: Connection, app: App, finished: list[Finished], now: datetime) -> list[Started]:
    """Decide, for each family `finished` rows belong to, whether it is complete now, in
    the caller's transaction (after it wrote those rows' ends); complete ones are recorded
    and start their callbacks.

    Args:
        conn: the transaction that finished the rows.
        app: resolves the root handlers (callbacks, MIN_SUCCESS_RATIO, queues).
        finished: the rows it finished.
        now: the clock's time (naive UTC), written as the completion's time.

    Returns:
        The callback rows inserted (to ring after the commit).
    """
    if not finished:
        return []
    own = {f.id for f in finished}
    families: set[int] = {f.root_id for f in finished if f.root_id is not None}
    roots = [f for f in finished if f.root_id is None and not is_callback(f.key)]
    alone: list[int] = []
    if roots:
        parents = rows.roots_with_children(conn, [f.id for f in roots])
        for f in roots:
            if f.id in parents:
                families.add(f.id)
            elif f.task_run or _has_callbacks(app, f.type):
                alone.append(f.id)
    started: list[Started] = []
    for root_id in sorted(families | set(alone)):
        if root_id not in alone and rows.running_witness(conn, root_id, own) is not None:
            continue
        root = rows.lock_root(conn, root_id)
        if root is None or root["status"] not in FINAL:
            continue
        if root_id not in alone and rows.unfinished(conn, root_id):
            continue
        started += complete(conn, app, root, now)
    return started


def settle_ids(conn: Connection, app: App, ids: list[int], now: datetime) -> list[Started]:
    """`settle` for rows `ids` that the caller's transaction finished outside the outcome
    writer (recover-stale's failed rows, an operator's cancel), read here.

    Args:
        conn: the transaction that finished them.
        app: as `settle`.
        ids: the finished rows.
        now: the clock's time (naive UTC).

    Returns:
        The callback rows inserted (to send after the commit).
    """
    finished = []
    for row in rows.finished_rows(conn, ids):
        finished.append(Finished(int(row["id"]), row["type"], row["root_id"],
                                 row["idempotency_key"], _task_run(row["payload"])))
    return settle(conn, app, finished, now)


def _task_run(payload: str | None) -> bool:
    """A task's run (a scheduled slot or a manual run: `job.finishing.task_run`), from
    a row's stored payload; a payload that is not a JSON object is none."""
    try:
        value = json.loads(payload) if payload else {}
    except ValueError:
        return False
    return isinstance(value, dict) and ("slot" in value or bool(value.get("manual")))


def _has_callbacks(app: App, job_type: str) -> bool:
    cls = app.resolve(job_type)
    return cls is not None and bool(callback_kinds(cls))


def complete(conn: Connection, app: App, root: dict, now: datetime) -> list[Started]:
    """Record the next completion of family `root` (the locked root row, as
    `store.families.lock_root` read it) and insert its callback rows; the task whose run
    it is takes the family's outcome. Returns the callback rows inserted."""
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
        return []
    update_task_status(conn, root_id, Status.COMPLETED if outcome == SUCCESS else Status.FAILED,
                       now, success=outcome == SUCCESS)
    log.info("family %s complete (generation %s): %s, %s", root_id, generation, outcome,
             json.dumps(dict(status_counts), sort_keys=True), extra={"trace_id": root_id})
    if cls is None:
        return []
    started = []
    for kind in callback_kinds(cls):
        if kind == "success" and outcome != SUCCESS or kind == "failure" and outcome == SUCCESS:
            continue
        job_type = callback_type(root["type"], kind)
        queue = app.queue_of(job_type)
        values = {"type": job_type, "queue": queue, "status": Status.PENDING,
                  "limit_key": None, "priority": 5,
                  "payload": json.dumps({"family": root_id, "generation": generation}),
                  "attempts": 0, "max_attempts": None,
                  "idempotency_key": callback_key(root_id, generation, kind),
                  "parent_id": root_id, "root_id": None,
                  "title": f"{kind} of family {root_id} (generation {generation})",
                  "scheduled_at": None, "created_at": now, "updated_at": now}
        row, created = insert_job(conn, values)
        if created:
            started.append(Started(root_id, int(row["id"]), queue))
    return started


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
