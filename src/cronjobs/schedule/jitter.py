"""A task's own zone, jitter and spread: the handler constants `TIMEZONE`, `JITTER` and
`SPREAD` (and `[tasks.<task>] timezone / jitter / spread`, which win), checked here, and
the deterministic offset of a slot's row from the slot's start.

The offset is a pure function of the task name, the slot key and the settings, so every
scheduler (on any host) and a scheduler after a restart compute the same one:

- `SPREAD = True`: an offset per task, from a hash of the task name, within the task's
  period (the interval between its slots; for a cron line the gap to the next fire), so
  fifty hourly tasks start spread over the hour instead of all at minute 0;
- `JITTER = "5m"`: an offset per task and slot, from a hash of (task, slot key), in
  [0, JITTER) seconds, added to the spread.

The total stays below the period (the spread uses the period less the jitter), whole
seconds. The slot key is unchanged; the slot's row gets `scheduled_at` = slot start + the
offset and is claimable only then.
"""

from __future__ import annotations

import hashlib

from ..durations import seconds
from .slots import check_zone


def check_jitter(value: object, name: str = "JITTER") -> float:
    """A jitter in seconds (0 allowed: none), from 90, `"45s"`, `"5m"`, a timedelta.

    Raises:
        ValueError: one line naming `name` and the value (not a duration, negative, or
            over a year).
    """
    return seconds(value, name=name, zero=True)


def check_spread(value: object, name: str = "SPREAD") -> bool:
    """`SPREAD` must be True or False.

    Raises:
        ValueError: one line naming `name` and the value.
    """
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r:.60}")
    return value


def check_handler(cls: type) -> None:
    """Check a handler class's `TIMEZONE`, `JITTER` and `SPREAD` (None / 0 / False: unset).

    Raises:
        ValueError: one line naming the constant and its value.
    """
    zone = getattr(cls, "TIMEZONE", None)
    if zone is not None:
        check_zone(zone, "TIMEZONE")
    jitter = getattr(cls, "JITTER", None)
    if jitter is not None:
        check_jitter(jitter, "JITTER")
    check_spread(getattr(cls, "SPREAD", False), "SPREAD")


def _fraction(*parts: str) -> float:
    """A number in [0, 1) from a sha256 of `parts` (the same in every process: not
    Python's `hash`, which is salted per process)."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def offset_seconds(task: str, slot_key: str, *, jitter: float = 0.0, spread: bool = False,
                   period: float = 0.0) -> int:
    """The offset of a slot's row from the slot's start, whole seconds.

    Args:
        task: the task name (the spread and the jitter hash it).
        slot_key: the slot key (the jitter hashes it with the task).
        jitter: JITTER, seconds (0: none); the jitter part is in [0, jitter).
        spread: SPREAD: add an offset per task within `period`.
        period: seconds from this slot to the next (the spread's range; the total is
            kept below it when it is more than 0).

    Returns:
        Seconds, >= 0; below `period` when `period` > 0; 0 with neither jitter nor spread.
    """
    jitter_range = min(jitter, period) if period > 0 else jitter
    part = int(_fraction("jitter", task, slot_key) * jitter_range) if jitter_range >= 1 else 0
    if spread and period > 0:
        part += int(_fraction("spread", task) * max(0.0, period - jitter_range))
    if period > 0 and part >= period:
        part = max(0, int(period) - 1)
    return part
