"""The scheduler: `tick(now)` starts each due task once per slot (`service.run_forever`
ticks each minute).

Exactly once per slot, with any number of schedulers: a run needs the unique
`cronjob_slot(task, slot)` record, inserted in the same transaction as the job row. A
scheduler that loses the race gets "already claimed" and logs at DEBUG only. Missed slots
follow the task's `CATCHUP` (`schedule.catchup`, `schedule.missed`): by default a tick
runs the latest slot once and records the others as skipped (`missed`). Slots are ordered
by their instants (`slots.slot_start`), never by their keys: a cron fire in the second
pass of a repeated DST hour has a key of its own (`202610250215+0100`) that sorts before
the first pass's `202610250230` but comes later.

One task never stops the others: a slot whose job row cannot be made (the handler's
`limit_key` raises on the slot's payload `{"slot": key}`, say) is recorded as skipped with
reason `error` (`overlap.record`, logged at ERROR once per slot; health's scheduler check
fails while it is the task's latest slot), and every other due slot of the tick starts. A
handler the worker would refuse (`CONCURRENCY = 0`, ...) stops the scheduler before its
first tick (`service.run_forever`), as it stops `cronjobs worker` and `cronjobs tick`.

The task list and its kill switch (`TaskInfo`, `task_infos`, `set_enabled`) live in
`cronjobs.schedule.tasks`; they are re-exported here, where code written before that split looks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from .. import store
from ..app import App, current
from ..clock import as_utc
from ..errors import CronjobsError, DatabaseRefused
from ..job import dispatching
from ..status import Status
from ..store.db import run_in_transaction
from . import missed, overlap
from .after import depth, start_after, start_waiting
from .deadline import expires_after
from .slots import Slot, current_slot, is_cron, slot_start
from .tasks import TaskInfo, after_of, run_at, set_enabled, task_infos

__all__ = ["TaskInfo", "TickReport", "set_enabled", "task_infos", "tick"]

log = logging.getLogger("cronjobs.schedule.scheduler")
_clock_back_warned: set[str] = set()  # non-empty while this process's clock is behind


@dataclass
class TickReport:
    """What one tick did.

    Attributes:
        now: the tick's instant (naive UTC).
        started: `(task, slot key, job id)` for each run started by this tick.
        skipped: task -> reason (`disabled`, `unavailable`, `already-run`: the current slot
            is the task's last one, as in the second pass of a repeated DST hour for a
            fixed-time cron line; `lost-race`: another scheduler claimed the slot;
            `not-yet`: a new cron task waits for its next fire time; `older-slot`: the
            slot began before the task's last one — the clock went back, or a late tick);
            and the overlap policy's (`cronjobs.schedule.overlap`): `running` (the previous run's
            family is still going: slot skipped and recorded), `buffered` (the slot waits
            as the task's buffered run, or is skipped because one waits already),
            `skipped` (the current slot was recorded as skipped by an earlier tick); `paused`
            (the task is paused: `cronjobs pause --task`; the slot is recorded as skipped);
            `error`: the slot's job row could not be made (`errors` says why; the slot is
            recorded as skipped); `missed`: the slot began too long ago for the task's
            `CATCHUP` (`none`: over a minute; `all`: before its window), recorded as
            skipped; `after`: the task runs after another (`AFTER`) whose run of this
            slot has no row yet (checked again by the next ticks until the slot passes:
            a slot never started is coalesced as a missed one); `idle`: the handler's
            `idle(app)` says the task has nothing to do now (`TaskInfo.idle`): no row,
            no skip record, no runtime write.
        errors: task -> the one-line error of each `error` skip of this tick.
        buffered: the tasks of `skipped` whose `buffered` slot is the one that waits (it
            starts when the previous run's family ends), not one dropped.
    """

    now: datetime
    started: list[tuple[str, str, int]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    buffered: set[str] = field(default_factory=set)


def tick(now: datetime | None = None, *, app: App | None = None) -> TickReport:
    """Start every due task whose slot has not run yet.

    Args:
        now: the instant to tick for (aware, or naive UTC); default the app's clock.

    Returns:
        A `TickReport`.

    Raises:
        ConfigError: an AFTER naming no registered task, or a cycle of AFTERs.
    """
    app = app or current()
    now = as_utc(now) if now is not None else app.clock.now()
    report = TickReport(now)
    after = after_of(app)
    due, catchups = missed.split(app, _due(app, now, report), now, _slot_row)
    report.skipped.update(dict.fromkeys(catchups.late, "missed"))
    missed.record(app, catchups, now)
    due, paused = overlap.hold_paused(app, due, now)
    due, held = overlap.hold_back(app, due)
    rows, failed = _slot_rows(app, due)
    due = [(info, slot) for info, slot in due if info.task in rows]
    held += paused + failed
    overlap.record(app, held, now)
    _report_held(report, held)
    started = _start_all(app, due, rows, now, report, after, catchups)
    for info, slot in due:
        job_id = started.get(info.task)
        if job_id is None:
            report.skipped.setdefault(info.task, "lost-race")
            continue
        if info.runtime.get("buffered_slot"):
            log.info("task %s: buffered slot %s started as job %s (slot %s)", info.task,
                     info.runtime["buffered_slot"], job_id, slot.key)
        report.started.append((info.task, slot.key, job_id))
    report.started.sort(key=lambda s: (s[0], s[2]))  # a task's catch-up slots in slot order
    if _clock_back_warned and not any(r == "older-slot" for r in report.skipped.values()):
        _clock_back_warned.clear()  # the clock is ahead again: a new jump back is said again
    return report


def _due(app: App, now: datetime, report: TickReport) -> list[tuple[TaskInfo, Slot]]:
    """The tasks whose current slot may start now, with that slot; the others are noted in
    `report.skipped` with the reason."""
    due: list[tuple[TaskInfo, Slot]] = []
    slots: dict[tuple[str, str], Slot] = {}  # one slot per (frequency, zone) per tick
    for info in task_infos(app, full=False):
        if not info.frequency or info.external:  # an external task runs elsewhere (pingin)
            continue
        try:
            reason, slot = _skip_reason(app, info, now, slots)
        except Exception as exc:  # e.g. a frequency stored by hand that no slot fits
            report.skipped[info.task] = "error"
            report.errors[info.task] = _one_line(exc)
            _log_slotless_error(info.task, report.errors[info.task])
            continue
        if reason is None:
            due.append((info, slot))
        else:
            report.skipped[info.task] = reason
    return due


def _skip_reason(app: App, info: TaskInfo, now: datetime,
                 slots: dict | None = None) -> tuple[str | None, Slot | None]:
    """`(reason, slot)`: why the task's current slot does not start now (None: it does);
    `slots`: the tick's slot per (frequency, zone), as schedule entries share cron lines."""
    if not info.enabled:
        return "disabled", None
    if not info.available:
        return "unavailable", None
    if info.idle:  # nothing to do now (the handler's `idle`): nothing written
        log.debug("task %s is idle: %s", info.task, info.idle)
        return "idle", None
    slots = {} if slots is None else slots
    slot = slots.get((info.frequency, info.timezone)) or slots.setdefault(
        (info.frequency, info.timezone), current_slot(info.frequency, now, info.timezone))
    last = info.runtime["last_slot"]
    if last == slot.key:
        return "already-run", slot
    if _older_than_last(app, info, slot, info.timezone):
        return "older-slot", slot
    if is_cron(info.frequency) and last is None and slot.at < now.replace(second=0, microsecond=0):
        return "not-yet", slot  # a new cron task waits for its next fire time
    return None, slot


def _older_than_last(app: App, info: TaskInfo, slot: Slot, tz: str) -> bool:
    """True when `slot` began before the task's last started slot (compared as instants:
    keys of a repeated DST hour do not sort in time); such a slot is never started (a newer
    one ran). When this host's clock is behind the last run too (an NTP
    step back, or another scheduler host ahead), say so once, at WARNING, until the clock
    is ahead again; otherwise (a late tick) only at DEBUG."""
    last = info.runtime["last_slot"]
    last_at = slot_start(info.frequency, last, tz) if last else None
    if last_at is None or slot.at >= last_at:
        return False
    last_run = info.runtime["last_run_at"]
    if last_run is not None and app.clock.now() < last_run:
        if not _clock_back_warned:
            log.warning("the clock went back: it is %s UTC here, but task %s already ran slot "
                        "%s at %s UTC (this host's clock, or another scheduler's, is off); no "
                        "task starts a slot older than its last one, so runs resume when the "
                        "clock passes it again", app.clock.now().isoformat(" ", "seconds"),
                        info.task, last, last_run.isoformat(" ", "seconds"))
        _clock_back_warned.add(info.task)
    else:
        log.debug("task %s: slot %s is older than its last slot %s (a late tick); skipped",
                  info.task, slot.key, last)
    return True


def _slot_rows(app: App, due: list[tuple[TaskInfo, Slot]]
               ) -> tuple[dict[str, dict], list[overlap.Held]]:
    """The job row of each due slot: `(task -> row, held)`, where `held` has an `error`
    skip for each slot whose row could not be made (the others still start)."""
    rows: dict[str, dict] = {}
    failed: list[overlap.Held] = []
    for info, slot in due:
        try:
            rows[info.task] = _slot_row(app, info, slot)
        except Exception as exc:  # the handler's code (limit_key) or its names: this slot only
            failed.append(overlap.Held(info, slot, overlap.Decision(
                overlap.SKIP, "error", _one_line(exc)), None))
    return rows, failed


def slot_error(app: App, info: TaskInfo, slot_key: str) -> str | None:
    """Why the job row of `info`'s slot `slot_key` cannot be made (one line), or None when
    it can now (health: the text of a slot recorded as skipped for `error`)."""
    try:
        _slot_row(app, info, Slot(slot_key, app.clock.now(), app.clock.now()))
    except Exception as exc:
        return _one_line(exc)
    return None


def _one_line(exc: BaseException) -> str:
    """An error as one line of at most 300 characters (our errors say what failed; anything
    else is named by its class)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if not isinstance(exc, CronjobsError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text[:300]


_slotless_logged: dict[str, str] = {}  # task -> the error last logged for it (no slot to record)


def _log_slotless_error(task: str, error: str) -> None:
    """Log an error that left a task without a slot at all (nothing can be recorded), once
    per task and error text in this process."""
    if _slotless_logged.get(task) != error:
        _slotless_logged[task] = error
        log.error("task %s: no slot can be computed: %s", task, error)


def _report_held(report: TickReport, held: list) -> None:
    """Note in `report` the slots the overlap policy, a pause or an error held back."""
    for h in held:
        report.skipped[h.info.task] = h.decision.reason
        if h.decision.detail is not None:
            report.errors[h.info.task] = h.decision.detail
        if h.decision.action in (overlap.BUFFER, overlap.WAIT):
            report.buffered.add(h.info.task)


def _start_all(app: App, due: list[tuple[TaskInfo, Slot]], rows: dict[str, dict],
               now: datetime, report: TickReport, after: dict[str, str],
               catchups: missed.Catchups) -> dict[str, int]:
    """Start the due slots of one tick in one transaction: claim every slot record, insert
    the jobs of the slots won (`rows`: task -> its slot's job row), note the runs and start
    the catch-up slots after them (`missed`); then the slots of the tasks that run after
    another (`_start_after`); then ring each queue once. Returns task -> job id for the
    slots this scheduler won (a lost slot logs at DEBUG only)."""
    due = sorted(due, key=lambda d: (d[0].task, d[1].key))  # one lock order for everyone
    plain = [(info, slot) for info, slot in due if info.task not in after]
    ordered = sorted([d for d in due if d[0].task in after],
                     key=lambda d: (depth(d[0].task, after), d[0].task))

    def claim_and_insert(conn) -> tuple[dict[str, int], dict[str, str], set[str]]:
        won = store.claim_slots(conn, [(info.task, slot.key) for info, slot in plain], now)
        mine = [(info, slot) for info, slot in plain if info.task in won]
        ids = dispatching.insert_batch(conn, [rows[info.task] for info, _ in mine])
        store.record_runs(conn, [(info.task, slot.key, job_id, slot.next_at)
                                 for (info, slot), job_id in zip(mine, ids, strict=True)], now)
        started = {info.task: job_id for (info, _), job_id in zip(mine, ids, strict=True)}
        missed.start_extras(app, conn, [(i, s, started[i.task]) for i, s in mine], catchups, now)
        waits, held = start_waiting(app, conn, ordered, rows, after, started, now)
        return started, waits, held

    if not due:
        return {}
    try:
        started, waits, held = run_in_transaction(app.engine, claim_and_insert)
    except DatabaseRefused:  # e.g. a job row already holds a slot's key: one by one
        return _start_each(app, due, rows, now, report, after)
    for task, other in waits.items():
        report.skipped[task] = "after"
        log.debug("task %s waits for task %s's run of the same slot", task, other)
    rung = _ring(app, due, rows, started, waits, held, after)
    missed.announce(app, catchups, report.started, rung)
    return started


def _ring(app: App, due: list[tuple[TaskInfo, Slot]], rows: dict[str, dict],
          started: dict[str, int], waits: dict[str, str], held: set[str],
          after: dict[str, str]) -> set[str]:
    """After the tick's commit: log each slot started and ring its queue (once per queue;
    a row moved by JITTER / SPREAD is rung when due; a waiting row is not rung). Returns
    the queues rung."""
    rung: set[str] = set()
    for info, slot in due:
        job_id = started.get(info.task)
        if job_id is None:
            if info.task not in waits:
                log.debug("task %s slot %s already claimed by another scheduler", info.task,
                          slot.key)
            continue
        log.info("task %s slot %s started as job %s%s", info.task, slot.key, job_id,
                 f" (waiting for {after[info.task]})" if info.task in held else "",
                 extra={"trace_id": job_id})
        queue, at = rows[info.task]["queue"], rows[info.task]["scheduled_at"]
        if at is not None and info.task not in held:  # JITTER / SPREAD: rung when due
            dispatching.send(app, job_id, queue, dispatching.delay(app, at))
        elif queue not in rung and info.task not in held:  # a message rings its queue
            rung.add(queue)
            dispatching.send(app, job_id, queue)
    return rung


def _start_each(app: App, due: list[tuple[TaskInfo, Slot]], rows: dict[str, dict],
                now: datetime, report: TickReport, after: dict[str, str]) -> dict[str, int]:
    """Start the due slots one transaction each (after the tick's batch was refused): a
    slot the database refuses is an `error` of that task alone, tried again next tick."""
    started: dict[str, int] = {}
    for info, slot in sorted(due, key=lambda d: depth(d[0].task, after)):
        try:
            if info.task in after:
                job_id, status = run_in_transaction(app.engine, lambda c, i=info, s=slot: (
                    start_after(app, c, i, s, rows[i.task], after[i.task], started, now)))
                if job_id is None and status is not None:
                    report.skipped[info.task] = "after"
                elif status == Status.PENDING:
                    dispatching.send(app, job_id, rows[info.task]["queue"])
            else:
                job_id = _start(app, info, slot, rows[info.task], now)
        except DatabaseRefused as exc:
            report.skipped[info.task] = "error"
            report.errors[info.task] = _one_line(exc)
            log.error("task %s slot %s not started: the database refused it: %s", info.task,
                      slot.key, report.errors[info.task])
            continue
        if job_id is not None:
            started[info.task] = job_id
    return started


def _slot_row(app: App, info: TaskInfo, slot: Slot) -> dict:
    """The job row of one slot of a task (its key makes a second row of the slot a no-op).

    Raises:
        InvalidJob: the row cannot be made (the handler's `limit_key` raised, ...).
    """
    payload = {"slot": slot.key} if info.schedule is None else {
        **(info.payload or {}), "slot": slot.key, "schedule": info.schedule}
    start = run_at(info, slot)  # the slot's start, moved by JITTER / SPREAD
    values = dispatching.build_row(app, info.type, payload,
                                   title=f"{info.task} {slot.key}",
                                   idempotency_key=f"cronjobs:{info.task}:{slot.key}",
                                   scheduled_at=start if info.jitter or info.spread else None)
    # Not checked against now as a caller's expiry is: a tick that comes after the
    # deadline still makes the row, which the sweep then ends `expired` (a skip).
    values["expires_at"] = expires_after(start, info.starting_deadline)
    return values


slot_row = _slot_row  # the public name: a backfill makes its slots' rows the same way


def _start(app: App, info: TaskInfo, slot: Slot, values: dict, now: datetime) -> int | None:
    def claim_and_insert(conn) -> int | None:
        if not store.claim_slot(conn, info.task, slot.key, now):
            return None
        row, _ = dispatching.insert_row(conn, values)
        store.record_run(conn, info.task, slot=slot.key, job_id=row["id"], now=now,
                         next_run_at=slot.next_at)
        return row["id"]

    job_id = run_in_transaction(app.engine, claim_and_insert)
    if job_id is not None:
        log.info("task %s slot %s started as job %s", info.task, slot.key, job_id,
                 extra={"trace_id": job_id})
        dispatching.send(app, job_id, values["queue"],
                         dispatching.delay(app, values["scheduled_at"]))
    return job_id
