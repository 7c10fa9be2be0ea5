"""The overlap policy of scheduled tasks: what a slot does while the task's previous
scheduled run is still going.

`OVERLAP` on the handler the scheduler starts (default `skip`):

- `skip`: a slot whose previous scheduled run is still pending or running starts
  nothing; the skip is recorded in the task's runtime row (`skipped_count`,
  `last_skipped_slot`, `last_skipped_at`, `last_skip_reason` = `running`) and logged.
- `buffer_one`: the first such slot waits (`buffered_slot`) and starts at the first tick
  after the run ends, never on top of it; a further slot while one waits is skipped
  (reason `buffered`).
- `allow`: every slot starts (the behaviour before this policy existed).

"Still going" is the run itself `pending` or `running`, and for a discover its whole
family too: every row dispatched under it (children, grandchildren: `root_id`) that is
`pending` or `running`, read from an index for all tasks at once
(`store.live_in_families`). Only the row statuses decide,
so nothing can drift: a worker killed mid-run holds the task until recover-stale takes its row back;
the row is then `pending` again (the run will be redone: still going) or `failed` (no
attempts left: the next slot starts). The built-in recover-stale task is `allow` for
that reason: its own row left `running` by a killed worker must not stop the one task
that takes such rows back.

A slot recorded as skipped never starts later in its period (a later tick in the same
hour sees `last_skipped_slot` and does nothing), whatever the reason: `running`,
`buffered`, `paused` (a paused task; `record` takes the reason), or `error` (the
scheduler could not make the slot's job row: the handler's `limit_key` raised on the slot's
payload, say; `Decision.detail` holds the error, logged at ERROR once per slot).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import store
from ..app import App
from ..handler import OVERLAPS, stage_of
from ..store.db import run_in_transaction

log = logging.getLogger("cronjobs.schedule.scheduler")

POLICIES = OVERLAPS
DEFAULT = "skip"
SKIP_REASONS = ("running", "buffered", "paused", "error",
                "missed",  # schedule.catchup
                "expired")  # its row not started by STARTING_DEADLINE (`store.expiry`)

START, SKIP, BUFFER, WAIT, NONE = "start", "skip", "buffer", "wait", "none"


@dataclass(frozen=True)
class Decision:
    """What one due slot does.

    Attributes:
        action: `start`; `skip` (record the slot as skipped for `reason`); `buffer` (keep
            it as the task's buffered slot); `wait` (it is the buffered slot already);
            `none` (it was recorded as skipped before: nothing to do).
        reason: `running` / `buffered` for `skip`, `buffer` and `wait`; `skipped` for
            `none`; None for `start`; or one the caller gives (`paused`, `error`).
        detail: the error of an `error` skip, one line; None otherwise.
    """

    action: str
    reason: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class Held:
    """A due slot the policy did not start: the task (`TaskInfo`), its `slots.Slot`, the
    `Decision`, and the live row of the previous run's family (None for `none`)."""

    info: Any
    slot: Any
    decision: Decision
    live_job: int | None


def policy_of(handler: type) -> str:
    """The OVERLAP of a handler class (`skip` when it says nothing)."""
    return getattr(handler, "OVERLAP", DEFAULT)


def decide(policy: str, runtime: dict, slot: str, live_job: int | None) -> Decision:
    """The decision for a due slot (pure).

    Args:
        policy: one of `POLICIES`.
        runtime: the task's runtime row (`last_skipped_slot`, `buffered_slot` are read).
        slot: the key of the due slot.
        live_job: a pending or running row of the previous scheduled run's family, or
            None when that family is done (or there was no previous run).

    Returns:
        A `Decision`.
    """
    buffered = runtime.get("buffered_slot")
    if runtime.get("last_skipped_slot") == slot and not (policy == "buffer_one" and buffered):
        return Decision(NONE, "skipped")
    if policy == "allow" or live_job is None:
        return Decision(START)
    if policy == "skip":
        return Decision(SKIP, "running")
    if buffered is None:
        return Decision(BUFFER, "buffered")
    if buffered == slot:
        return Decision(WAIT, "buffered")
    return Decision(SKIP, "buffered")


def hold_back(app: App, due: list[tuple[Any, Any]]) -> tuple[list[tuple[Any, Any]], list[Held]]:
    """Split a tick's due slots into those that start and those the overlap policy holds.

    Args:
        due: `(TaskInfo, Slot)` pairs (the runtime rows carry `last_job_id`,
            `last_skipped_slot`, `buffered_slot`).

    Returns:
        `(start, held)`: the pairs to start, and a `Held` per slot that starts nothing.
        One read of the database for all tasks (none when every task is `allow`).
    """
    roots = {info.task: info.runtime.get("last_job_id") for info, slot in due
             if _needs_check(policy_of(info.handler), info.runtime, slot.key)}
    roots = {task: root for task, root in roots.items() if root is not None}
    live: dict[int, int] = {}
    if roots:
        families = {roots[info.task] for info, _ in due
                    if info.task in roots and stage_of(info.type) == "discover"}
        with app.engine.connect() as conn:
            live = store.live_in_families(conn, list(roots.values()), families)
    start, held = [], []
    for info, slot in due:
        root = roots.get(info.task)
        live_job = live.get(root) if root is not None else None
        decision = decide(policy_of(info.handler), info.runtime, slot.key, live_job)
        if decision.action == START:
            start.append((info, slot))
        else:
            held.append(Held(info, slot, decision, live_job))
    return start, held


def hold_paused(app: App, due: list, now: datetime) -> tuple[list, list[Held]]:
    """Split off the due slots of paused tasks (`cronjobs pause --task NAME`, the Pauses
    & blocks page): each becomes a skip with reason `paused`, recorded by `record` like
    any skip. One read of the live pauses per tick.

    Args:
        due: `(TaskInfo, Slot)` pairs the tick found due.
        now: the tick's instant (naive UTC): a pause whose `--for` ended holds nothing
            (judged on the database's clock, `store.flow.judged_at`).

    Returns:
        `(start, held)`: the pairs of tasks not paused, and a `Held` for each paused one.
    """
    if not due:
        return due, []
    with app.engine.connect() as conn:
        at = store.flow.judged_at(conn, app.clock, now)
        paused = {p["name"] for p in store.list_pauses(conn, at) if p["scope"] == "task"}
    if not paused:
        return due, []
    return ([(info, slot) for info, slot in due if info.task not in paused],
            [Held(info, slot, Decision(SKIP, "paused"), None) for info, slot in due
             if info.task in paused])


def record(app: App, held: list[Held], now: datetime) -> None:
    """Write what the held slots mean to the runtime rows, in one transaction, and log
    each new skip or buffered slot (a slot already recorded, by this or another
    scheduler, is not written or logged again).

    Args:
        held: from `hold_back`, or made by the caller (`Held(info, slot,
            Decision("skip", "paused"), None)` records a paused task's slot).
        now: the tick's instant (naive UTC), written as `last_skipped_at`.
    """
    skips: dict[str, list[Held]] = defaultdict(list)
    buffers = []
    for h in held:
        if h.decision.action == SKIP and h.info.runtime.get("last_skipped_slot") != h.slot.key:
            skips[h.decision.reason].append(h)
        elif h.decision.action == BUFFER:
            buffers.append(h)
    if not skips and not buffers:
        return

    def write(conn) -> tuple[list[Held], list[Held]]:
        recorded = []
        for reason, items in skips.items():
            done = set(store.record_skips(conn, [(h.info.task, h.slot.key) for h in items],
                                          reason, now))
            recorded += [h for h in items if (h.info.task, h.slot.key) in done]
        return recorded, [h for h in buffers
                          if store.buffer_slot(conn, h.info.task, h.slot.key, now)]

    skipped, buffered = run_in_transaction(app.engine, write)
    for h in skipped:
        level = logging.ERROR if h.decision.reason == "error" else logging.INFO
        log.log(level, "task %s slot %s skipped (%s)%s", h.info.task, h.slot.key,
                h.decision.reason, _because(h))
    for h in buffered:
        log.info("task %s slot %s buffered: it starts when job %s and its family are done "
                 "(OVERLAP buffer_one)", h.info.task, h.slot.key, h.live_job)


def _because(h: Held) -> str:
    if h.decision.reason == "running":
        return (f": job {h.info.runtime.get('last_job_id')} of its previous slot is still "
                f"going (job {h.live_job} pending or running; OVERLAP skip)")
    if h.decision.reason == "buffered":
        return (f": slot {h.info.runtime.get('buffered_slot')} already waits behind job "
                f"{h.live_job} (OVERLAP buffer_one)")
    if h.decision.reason == "paused":
        return f": the task is paused (`cronjobs resume --task {h.info.task}`)"
    if h.decision.reason == "error":
        return f": its job row could not be made: {h.decision.detail}"
    return ""


def _needs_check(policy: str, runtime: dict, slot: str) -> bool:
    """Whether `decide` needs the family's state (not for `allow`, nor for a slot already
    recorded as skipped)."""
    if policy == "allow":
        return False
    return not (runtime.get("last_skipped_slot") == slot
                and not (policy == "buffer_one" and runtime.get("buffered_slot")))


