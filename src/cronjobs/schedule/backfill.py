"""Backfill: one row per slot of a task whose start lies in a range, made as the
scheduler makes a slot's row (`cronjobs backfill TASK --from ISO --to ISO`).

Each slot is claimed in `cronjob_slot`, so the scheduler never starts it again, and run
twice a backfill makes nothing new: a slot that already ran (by the scheduler or an
earlier backfill) gives its existing row. The rows are ordinary rows: limits and pauses
hold them as any other. Unless the task's OVERLAP is `allow`, each new row waits for the
row of the slot before it (`depends_on`, `allow_failed`), the first for the task's last
scheduled run, so they run one at a time in slot order. The task's schedule state
(`last_slot`, ...) is not touched: a backfill never moves it, backwards or forwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .. import store
from ..app import App, current
from ..clock import as_utc
from ..config.sources import did_you_mean
from ..errors import BackfillRefused, HandlerNotFound, InvalidJob
from ..family import depends
from ..job import dispatching
from ..status import Status
from ..store.db import run_in_transaction
from .overlap import policy_of
from .scheduler import slot_row
from .slots import Slot, current_slot
from .tasks import TaskInfo, task_infos

MAX_SLOTS = 10_000
_READ_CHUNK = 500


@dataclass(frozen=True)
class Backfilled:
    """One slot of a backfill.

    Attributes:
        key: the slot key (`cronjob_slot.slot`).
        at: when the slot began, naive UTC.
        job_id: its row (None in a dry run for a slot that would be made).
        created: True when this backfill made the row.
    """

    key: str
    at: datetime
    job_id: int | None
    created: bool


def backfill(task: str, start: datetime, end: datetime, *, dry_run: bool = False,
             app: App | None = None) -> list[Backfilled]:
    """Make one row per slot of `task` that began in [start, end] (both inclusive).

    Args:
        task: a task name (`db-backup`).
        start, end: the range; naive times are UTC, aware ones are converted. Cron lines
            are read in the task's zone.
        dry_run: write nothing; the slots that would be made have `job_id` None.

    Returns:
        A `Backfilled` per slot, in slot order: the new rows, and for a slot that already
        ran its existing row (`created` False).

    Raises:
        HandlerNotFound: no registered task is called `task` (with a "did you mean" hint).
        BackfillRefused: `end` before `start`, more than `MAX_SLOTS` slots, or a task
            without a frequency.
        InvalidJob: a slot's row cannot be made (the handler's `limit_key` raised, ...).
    """
    app = app or current()
    info = _task(app, task)
    start, end = as_utc(start), as_utc(end)
    if end < start:
        raise BackfillRefused(f"--to {end:%Y-%m-%d %H:%M:%S} is before --from "
                              f"{start:%Y-%m-%d %H:%M:%S} (UTC)")
    slots = _slots(info, start, end)
    with app.engine.connect() as conn:
        existing = _existing(conn, task, [s.key for s in slots])
    if dry_run:
        return [Backfilled(s.key, s.at, existing.get(s.key), False) for s in slots]
    rows = {}
    for slot in slots:
        if slot.key not in existing:
            try:
                rows[slot.key] = slot_row(app, info, slot)
            except Exception as exc:
                raise InvalidJob(f"task {task}: the row of slot {slot.key} cannot be made: "
                                 f"{exc}") from None
    made = run_in_transaction(app.engine,
                              lambda conn: _make(app, conn, info, slots, rows, existing))
    rung: set[str] = set()
    for job_id, status, queue in made.values():
        if status == Status.PENDING and queue not in rung:
            rung.add(queue)
            dispatching.send(app, job_id, queue)
    return [Backfilled(s.key, s.at, made[s.key][0] if s.key in made else existing.get(s.key),
                       s.key in made) for s in slots]


def _task(app: App, task: str) -> TaskInfo:
    """The task called `task`, with a frequency."""
    infos = {i.task: i for i in task_infos(app)}
    info = infos.get(task)
    if info is None:
        raise HandlerNotFound(f"unknown task {task!r}{did_you_mean(task, sorted(infos))}; "
                              f"see `cronjobs tasks`")
    if not info.frequency:
        raise BackfillRefused(f"task {task} has no frequency: it has no slots to backfill")
    return info


def _slots(info: TaskInfo, start: datetime, end: datetime) -> list[Slot]:
    """The slots of the task that began in [start, end], oldest first."""
    slot = current_slot(info.frequency, start, info.timezone)
    if slot.at < start:
        slot = current_slot(info.frequency, slot.next_at, info.timezone)
    slots = []
    while slot.at <= end:
        if len(slots) == MAX_SLOTS:
            raise BackfillRefused(
                f"the range {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC holds more than "
                f"{MAX_SLOTS:,} slots of task {info.task} ({info.frequency}); backfill it in "
                f"parts")
        slots.append(slot)
        slot = current_slot(info.frequency, slot.next_at, info.timezone)
    return slots


def _existing(conn, task: str, keys: list[str]) -> dict[str, int]:
    """`{slot key: job id}` of the slots among `keys` that already have a run."""
    found: dict[str, int] = {}
    for n in range(0, len(keys), _READ_CHUNK):
        claimed = store.runtime.claimed_slots(conn, task, slots=keys[n:n + _READ_CHUNK])
        found.update((k, j) for k, j in claimed.items() if j is not None)
    return found


def _make(app: App, conn, info: TaskInfo, slots: list[Slot], rows: dict[str, dict],
          existing: dict[str, int]) -> dict[str, tuple[int, str, str]]:
    """Claim and insert the new slots' rows in one transaction, each waiting for the one
    before unless OVERLAP is `allow`; a slot another claimer took meanwhile joins
    `existing`. Returns `{key: (job id, status, queue)}` of each row made."""
    chain = policy_of(info.handler) != "allow"
    now = app.clock.now()
    runtime = store.get_runtime(conn, info.task) or {}
    previous = runtime.get("last_job_id")
    made = {}
    for slot in slots:
        if slot.key in rows and not store.claim_slot(conn, info.task, slot.key, now):
            taken = _slot_job(conn, info.task, slot.key)
            if taken is not None:
                existing[slot.key] = taken
        if slot.key not in rows or slot.key in existing:
            previous = existing.get(slot.key) or previous
            continue
        values, after = rows[slot.key], []
        if chain and previous is not None:
            try:
                values = dispatching.admitted(app, conn, values, [previous], allow_failed=True)
                after = [previous]
            except InvalidJob:  # the row before is gone (a cancelled row deleted): ended
                pass
        row, created = dispatching.insert_row(conn, values)
        if created and after:
            depends.record(conn, row["id"], after, True)
        store.runtime.set_slot_job(conn, info.task, slot.key, row["id"])
        made[slot.key] = (row["id"], values["status"], values["queue"])
        previous = row["id"]
    return made


def _slot_job(conn, task: str, key: str) -> int | None:
    """The job id of a claimed slot (None while its claimer has not written it)."""
    return store.runtime.claimed_slots(conn, task, slots=[key]).get(key)
