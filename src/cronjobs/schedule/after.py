"""Tasks that run after another (`AFTER = "acme-sync"`): the slot's row of such a task
is inserted `waiting` on the other task's row of the same slot (its whole family), in the
tick's transaction (`start_after`), and released when that family has ended
(`cronjobs.family.settle`)."""

from __future__ import annotations

from datetime import datetime

from .. import store
from ..app import App
from ..errors import InvalidJob
from ..family import depends
from ..job import dispatching
from ..status import Status
from .slots import Slot
from .tasks import TaskInfo


def depth(task: str, after: dict[str, str]) -> int:
    """How many tasks `task` runs after, in a chain (`after_of` refused cycles)."""
    depth = 0
    while task in after:
        task, depth = after[task], depth + 1
    return depth


def start_after(app: App, conn, info: TaskInfo, slot: Slot, values: dict, other: str,
                 started: dict[str, int], now: datetime) -> tuple[int | None, str | None]:
    """Start the slot of a task that runs after task `other` (`AFTER`), in the tick's
    transaction: its row waits for `other`'s row of the same slot (its whole family),
    whatever that run's outcome (`allow_failed`). When `other`'s slot has no row yet, the
    slot is not claimed: the next ticks look again until the slot passes.

    Returns:
        `(job id, its status)`; `(None, "after")` while `other`'s slot has no row;
        `(None, None)` when another scheduler claimed the slot.
    """
    first = started.get(other) or store.slot_jobs(conn, [(other, slot.key)]).get(
        (other, slot.key))
    if first is None:
        return None, "after"
    if not store.claim_slot(conn, info.task, slot.key, now):
        return None, None
    try:
        values = dispatching.admitted(app, conn, values, [first], allow_failed=True)
    except InvalidJob:  # `other`'s run is gone (a cancelled row deleted): it has ended
        first = None
    row, created = dispatching.insert_row(conn, values)
    if created and first is not None:
        depends.record(conn, row["id"], [first], True)
    store.record_run(conn, info.task, slot=slot.key, job_id=row["id"], now=now,
                     next_run_at=slot.next_at)
    if values["status"] != Status.PENDING:
        store.update_task_status(conn, row["id"], values["status"], now)
    return row["id"], values["status"]


def start_waiting(app: App, conn, ordered: list[tuple[TaskInfo, Slot]], rows: dict[str, dict],
                  after: dict[str, str], started: dict[str, int],
                  now: datetime) -> tuple[dict[str, str], set[str]]:
    """`start_after` for the due slots of the tasks that run after another (`ordered`:
    those run after fewer first), in the tick's transaction; `started` gains their job ids.

    Returns:
        `(waits, held)`: task -> the task it waits for, for slots not started (the other
        has no row yet); the tasks whose row was inserted `waiting`.
    """
    waits: dict[str, str] = {}
    held: set[str] = set()
    for info, slot in ordered:
        job_id, status = start_after(app, conn, info, slot, rows[info.task],
                                     after[info.task], started, now)
        if job_id is None and status is not None:
            waits[info.task] = after[info.task]
        elif job_id is not None:
            started[info.task] = job_id
            if status != Status.PENDING:
                held.add(info.task)
    return waits, held
