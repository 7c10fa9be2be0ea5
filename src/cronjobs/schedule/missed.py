"""Missed runs in a tick (`CATCHUP`; the rules and the pure plan are `schedule.catchup`):
which slot of each due task goes on through the tick, the slots missed for good recorded
with the reason `missed`, and the catch-up slots of `CATCHUP = "all"` after the first,
started in the tick's transaction.

The first slot of a task's catch-up goes through the tick as its current slot does (the
pause, the overlap policy, the slot claim); the others start only when this scheduler won
that first claim, each claiming its own `cronjob_slot` record (so exactly once across
schedulers and backfills), each its own row keyed `cronjobs:<task>:<slot>`. Unless the
task's OVERLAP is `allow`, each waits for the one before (`depends_on`, `allow_failed`),
so they run one at a time in slot order. A task that runs AFTER another starts one slot
per tick (its first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from .. import store
from ..app import App
from ..family import depends
from ..job import dispatching
from ..status import Status
from ..store.db import run_in_transaction
from .catchup import Catchup, Plan, baseline, catchup_of, plan
from .overlap import policy_of
from .slots import Slot, is_cron
from .tasks import TaskInfo

log = logging.getLogger("cronjobs.schedule.scheduler")


@dataclass
class Catchups:
    """What the tick does with missed slots.

    Attributes:
        missed: `(task info, plan)` of each task with slots missed for good.
        extras: task -> `(slot, its job row values)` to start after the task's first slot
            (`CATCHUP = "all"`), oldest first.
        late: the tasks that start nothing because their slot is missed (`none`, or `all`
            with nothing left in its window).
        started: `(info, slot, job id, status, queue)` of each catch-up slot after a first
            that `start_extras` started (set in the tick's transaction).
    """

    missed: list[tuple[TaskInfo, Plan]]
    extras: dict[str, list[tuple[Slot, dict]]]
    late: set[str]
    started: list[tuple[TaskInfo, Slot, int, str, str]] = field(default_factory=list)


def split(app: App, due: list[tuple[TaskInfo, Slot]], now: datetime,
          make_row: Callable[[App, TaskInfo, Slot], dict]
          ) -> tuple[list[tuple[TaskInfo, Slot]], Catchups]:
    """Apply each due task's `CATCHUP` to its slots.

    Args:
        due: `(TaskInfo, current slot)` of the tasks due now.
        now: the tick's instant, naive UTC.
        make_row: the scheduler's job row of a slot (raises when it cannot be made).

    Returns:
        `(due, catchups)`: the `(info, slot)` pairs that go on through the tick (a task's
        first slot to start), and the `Catchups`.
    """
    out: list[tuple[TaskInfo, Slot]] = []
    found = Catchups([], {}, set())
    for info, slot in due:
        rule = catchup_of(info.handler, app.settings.task(info.task))
        claimed = _claimed(app, info, rule, slot)
        p = plan(rule, info.frequency, info.runtime, slot, now, info.timezone, claimed)
        if p.missed:
            found.missed.append((info, p))
        if not p.start:
            found.late.add(info.task)
            continue
        out.append((info, p.start[0]))
        extras = []
        for extra in p.start[1:]:
            try:
                extras.append((extra, make_row(app, info, extra)))
            except Exception:  # the next tick meets it as its first slot, an `error` skip
                break
        if extras:
            found.extras[info.task] = extras
    return out, found


def _claimed(app: App, info: TaskInfo, rule: Catchup, slot: Slot) -> set[str]:
    """The keys of slots after the task's baseline that have a run already (a backfill's),
    read for `CATCHUP = "all"` when the current slot is new."""
    base = baseline(info.frequency, info.runtime, info.timezone)
    if rule.mode != "all" or base is None or base[1] >= slot.at:
        return set()
    with app.engine.connect() as conn:
        return set(store.runtime.claimed_slots(conn, info.task, after=base[0]))


def record(app: App, catchups: Catchups, now: datetime) -> None:
    """Record the missed slots in the runtime rows (reason `missed`), in one transaction,
    before the tick records any other skip; log those this call recorded (a scheduler
    ticking the same instant records them once)."""
    if not catchups.missed:
        return

    def write(conn) -> list[tuple[TaskInfo, Plan]]:
        return [(info, p) for info, p in catchups.missed
                if store.runtime.record_missed(conn, info.task, p.missed, p.newest_missed, now)]

    for info, p in run_in_transaction(app.engine, write):
        more = "+" if p.missed >= 1000 and is_cron(info.frequency) else ""  # counted to 1000
        mode = catchup_of(info.handler, app.settings.task(info.task)).mode
        if mode == "latest":
            log.info("task %s: %d%s missed slot(s) after %s coalesced into %s", info.task,
                     p.missed, more, p.after, p.start[0].key)
        else:
            log.info("task %s: %d%s missed slot(s) after %s, up to %s, not started (CATCHUP "
                     "%s)", info.task, p.missed, more, p.after, p.newest_missed, mode)


def start_extras(app: App, conn, won: list[tuple[TaskInfo, Slot, int]], catchups: Catchups,
                 now: datetime) -> None:
    """Start the catch-up slots after each won first slot, in the tick's transaction, and
    note them in `catchups.started` (a slot claimed already, by a backfill say, is passed
    over).

    Args:
        won: `(info, first slot, its job id)` of the slots this scheduler started.
    """
    started = catchups.started
    started.clear()  # a transaction retried runs this again
    for info, _, first in won:
        previous = first
        chain = policy_of(info.handler) != "allow"
        for slot, values in catchups.extras.get(info.task, ()):
            if not store.claim_slot(conn, info.task, slot.key, now):
                continue
            if chain:
                values = dispatching.admitted(app, conn, values, [previous], allow_failed=True)
            row, created = dispatching.insert_row(conn, values)
            if created and chain:
                depends.record(conn, row["id"], [previous], True)
            store.record_run(conn, info.task, slot=slot.key, job_id=row["id"], now=now,
                             next_run_at=slot.next_at)
            if values.get("status", Status.PENDING) != Status.PENDING:
                store.update_task_status(conn, row["id"], values["status"], now)
            started.append((info, slot, row["id"], values.get("status", Status.PENDING),
                            values["queue"]))
            previous = row["id"]


def announce(app: App, catchups: Catchups, report: list[tuple[str, str, int]],
             rung: set[str]) -> None:
    """After the tick's commit: add the catch-up slots started to `report` (the
    `TickReport.started` list), log them, and ring each queue not `rung` yet once for
    those that are `pending` (the others wait for the one before)."""
    for info, slot, job_id, status, queue in catchups.started:
        report.append((info.task, slot.key, job_id))
        log.info("task %s slot %s started as job %s (catch-up)", info.task, slot.key, job_id,
                 extra={"trace_id": job_id})
        if status == Status.PENDING and queue not in rung:
            rung.add(queue)
            dispatching.send(app, job_id, queue)
