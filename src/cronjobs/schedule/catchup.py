"""Missed runs: what a tick does with the slots of a task that passed while no scheduler
ticked (`CATCHUP`), as rules and a pure plan; the tick's writes are `schedule.missed`.

- `CATCHUP = "latest"` (the default): the tick starts the task's current slot even when
  late; the slots missed before it are coalesced into it.
- `"none"`: a slot starts only from a tick within its first minute (at most
  `ON_TIME_SECONDS` after it began); a later tick starts nothing for it.
- `"all"`: every missed slot that began within `CATCHUP_WINDOW` before now (a duration,
  default `"1d"`) starts, oldest first, at most `CATCHUP_MAX` (default 100) per tick; the
  next ticks go on where it stopped.

Every slot that starts nothing because it was missed is recorded as skipped with the
reason `missed`, counted like `slots.slots_between` counts. `[tasks.<task>] catchup`,
`catchup_window` and `catchup_max` win over the handler's constants.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import islice

from ..durations import seconds
from .slots import Slot, current_slot, slot_start, slots_between

CATCHUPS = ("latest", "none", "all")
DEFAULT_MODE = "latest"
DEFAULT_WINDOW = "1d"
DEFAULT_MAX = 100
ON_TIME_SECONDS = 60  # `none`: a tick at most this long after a slot began starts it


@dataclass(frozen=True)
class Catchup:
    """A task's catch-up rule, checked.

    Attributes:
        mode: one of `CATCHUPS`.
        window_seconds: `all`: how far back (seconds before the tick) a missed slot may
            have begun and still start.
        max_per_tick: `all`: at most this many slots started by one tick.
    """

    mode: str = DEFAULT_MODE
    window_seconds: float = 86400.0
    max_per_tick: int = DEFAULT_MAX


@dataclass(frozen=True)
class Plan:
    """What one tick does with one task's slots (`plan`).

    Attributes:
        start: the slots to start, oldest first (empty: none).
        missed: how many slots are missed for good (recorded with reason `missed`).
        newest_missed: the key of the newest of them (None when `missed` is 0).
        after: the key of the slot they follow (the task's last run or skip; None for a
            task that never ran).
    """

    start: list[Slot] = field(default_factory=list)
    missed: int = 0
    newest_missed: str | None = None
    after: str | None = None


def check_mode(value: object, name: str = "CATCHUP") -> str:
    """`value` if it is one of `CATCHUPS`. Raises ValueError naming `name` and the value."""
    if not isinstance(value, str) or value not in CATCHUPS:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in CATCHUPS)}, "
                         f"got {value!r:.60}")
    return value


def check_max(value: object, name: str = "CATCHUP_MAX") -> int:
    """`value` if it is an int >= 1. Raises ValueError naming `name` and the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r:.60}")
    return value


def check_handler(cls: type) -> None:
    """Check a handler class's `CATCHUP`, `CATCHUP_WINDOW` and `CATCHUP_MAX` (the
    registry's `check_class` calls it).

    Raises:
        ValueError: one line naming the constant and its value.
    """
    check_mode(getattr(cls, "CATCHUP", DEFAULT_MODE))
    seconds(getattr(cls, "CATCHUP_WINDOW", DEFAULT_WINDOW), name="CATCHUP_WINDOW")
    check_max(getattr(cls, "CATCHUP_MAX", DEFAULT_MAX))


def catchup_of(cls: type, task_settings: object | None = None) -> Catchup:
    """The catch-up rule of a task: the `[tasks.<task>]` keys `catchup`,
    `catchup_window`, `catchup_max` (a `TaskSettings`; None values say nothing) over the
    handler class's constants (checked at registration).

    Raises:
        ValueError: a value that is not valid (named, one line).
    """
    def pick(key: str, constant: str, default: object) -> object:
        value = getattr(task_settings, key, None)
        return value if value is not None else getattr(cls, constant, default)

    return Catchup(check_mode(pick("catchup", "CATCHUP", DEFAULT_MODE)),
                   seconds(pick("catchup_window", "CATCHUP_WINDOW", DEFAULT_WINDOW),
                           name="CATCHUP_WINDOW"),
                   check_max(pick("catchup_max", "CATCHUP_MAX", DEFAULT_MAX)))


def baseline(frequency: str, runtime: dict, tz: str) -> tuple[str, datetime] | None:
    """The task's newest slot that ran or was recorded as skipped, `(key, start)`, the
    slots after which count as missed; None for a task that never ran."""
    best = None
    for key in (runtime.get("last_slot"), runtime.get("last_skipped_slot")):
        at = slot_start(frequency, key, tz) if key else None
        if at is not None and (best is None or at > best[1]):
            best = (key, at)
    return best


def plan(rule: Catchup, frequency: str, runtime: dict, slot: Slot, now: datetime,
         tz: str = "UTC", claimed: Collection[str] = ()) -> Plan:
    """What one tick does with a due task's slots (pure).

    Args:
        rule: the task's `Catchup`.
        frequency: the task's effective frequency.
        runtime: its runtime row (`last_slot`, `last_skipped_slot` are read).
        slot: its current slot (`slots.current_slot` at `now`).
        now: the tick's instant, naive UTC.
        tz: the zone its cron lines are read in.
        claimed: keys of slots after the baseline that already have a run (a backfill's):
            not started again (`all` only; one older than the window still counts as
            missed).

    Returns:
        A `Plan`.
    """
    base = baseline(frequency, runtime, tz)
    if runtime.get("buffered_slot") or (base is not None and base[1] >= slot.at):
        return Plan([slot])  # a buffered run waits, or nothing new: the overlap policy says
    late = (now - slot.at).total_seconds() > ON_TIME_SECONDS
    if rule.mode == "latest" or (rule.mode == "none" and not late) or base is None:
        if rule.mode == "none" and late:
            return Plan([], 1, slot.key)
        return _missed_before(frequency, base, slot, tz, [slot])
    if rule.mode == "none":
        before = _missed_before(frequency, base, slot, tz, [])
        return Plan([], before.missed + 1, slot.key, base[0])
    edge = now - timedelta(seconds=rule.window_seconds)
    inside = (s for s in _walk(frequency, base, edge, slot, tz) if s.key not in claimed)
    start = list(islice(inside, rule.max_per_tick))
    outside = current_slot(frequency, edge, tz)  # the newest slot that began at or before edge
    if outside.at <= base[1]:
        return Plan(start)
    return Plan(start, slots_between(frequency, base[0], outside, tz) + 1, outside.key, base[0])


def _missed_before(frequency: str, base: tuple[str, datetime] | None, slot: Slot, tz: str,
                   start: list[Slot]) -> Plan:
    """A plan starting `start` that records the slots strictly between the baseline and
    `slot` as missed."""
    if base is None:
        return Plan(start)
    count = slots_between(frequency, base[0], slot, tz)
    if not count:
        return Plan(start)
    previous = current_slot(frequency, slot.at - timedelta(seconds=1), tz)
    return Plan(start, count, previous.key, base[0])


def _walk(frequency: str, base: tuple[str, datetime], edge: datetime, slot: Slot,
          tz: str) -> Iterator[Slot]:
    """The slots after the baseline that began after `edge`, up to `slot`, oldest first."""
    at = current_slot(frequency, max(base[1], edge), tz)
    if at.at <= base[1] or at.at <= edge:
        at = current_slot(frequency, at.next_at, tz)
    while at.at <= slot.at:
        yield at
        at = current_slot(frequency, at.next_at, tz)
