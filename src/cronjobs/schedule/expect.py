"""What a task promises: `EXPECT` (a success within some time, a run's duration within a
range) and `AUTO_PAUSE_AFTER_FAILURES` (pause the task after N failed scheduled runs in a
row), read from a handler class or its `[tasks.<task>]` settings and checked at
registration and when the settings load. Plain rules: no database, no App.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..durations import seconds

EXPECT_KEYS = ("success_within", "duration")
AUTO_PAUSE_BY = "cronjobs"  # the author of an automatic pause


@dataclass(frozen=True)
class Expect:
    """A task's expectations (all in seconds; None: not expected).

    Attributes:
        success_within: a successful run at most this long after the previous one (or
            after the task's first run, when it never succeeded); health's `overdue:<task>`
            fails past it.
        min_seconds: a run takes at least this long (`too_fast:<task>` below it).
        max_seconds: a run takes at most this long (`too_slow:<task>` above it).
    """

    success_within: float | None = None
    min_seconds: float | None = None
    max_seconds: float | None = None


def parse_expect(value: object, where: str = "EXPECT") -> Expect | None:
    """Read an `EXPECT` mapping: `{"success_within": "26h", "duration": ("30s", "20m")}`,
    either key optional; durations as `cronjobs.durations.seconds` reads them.

    Args:
        value: the mapping, or None (no expectations).
        where: how the error names the setting (`EXPECT`, `[tasks.x] expect`).

    Returns:
        An `Expect`, or None for None.

    Raises:
        ValueError: one line naming the bad key or value (an unknown key, a duration that
            does not read or is not > 0, a `duration` that is not a (min, max) pair with
            min < max).
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a mapping with the keys {', '.join(EXPECT_KEYS)}, "
                         f"got {value!r}")
    for key in value:
        if key not in EXPECT_KEYS:
            raise ValueError(f"{where}: unknown key {key!r} (keys: {', '.join(EXPECT_KEYS)})")
    within = value.get("success_within")
    low = high = None
    if within is not None:
        within = seconds(within, name=f"{where} success_within")
    pair = value.get("duration")
    if pair is not None:
        if isinstance(pair, (str, bytes, Mapping)) or not hasattr(pair, "__len__") \
                or len(pair) != 2:
            raise ValueError(f"{where} duration must be a (min, max) pair, got {pair!r}")
        low = seconds(pair[0], name=f"{where} duration min")
        high = seconds(pair[1], name=f"{where} duration max")
        if low >= high:
            raise ValueError(f"{where} duration: min {pair[0]!r} must be less than max "
                             f"{pair[1]!r}")
    return Expect(within, low, high)


def check_auto_pause(value: object, where: str = "AUTO_PAUSE_AFTER_FAILURES") -> int | None:
    """Check an `AUTO_PAUSE_AFTER_FAILURES` value: None (off) or an integer >= 1.

    Raises:
        ValueError: one line naming the value.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be an integer >= 1 (or None: off), got {value!r}")
    return value


def check_expectations(cls: type) -> None:
    """Check a handler class's `EXPECT` and `AUTO_PAUSE_AFTER_FAILURES` (registration).

    Raises:
        ValueError: one line naming the constant and the bad key or value.
    """
    parse_expect(getattr(cls, "EXPECT", None))
    check_auto_pause(getattr(cls, "AUTO_PAUSE_AFTER_FAILURES", None))


def expect_of(cls: type | None, cfg: object) -> Expect | None:
    """The expectations of a task: its settings' `expect` (`cfg`, a `TaskSettings`) when
    set, else its handler's `EXPECT`; None when neither says anything."""
    value = getattr(cfg, "expect", None)
    if value is not None:
        return parse_expect(value, "[tasks] expect")
    return parse_expect(getattr(cls, "EXPECT", None))


def auto_pause_of(cls: type | None, cfg: object) -> int | None:
    """After how many failed scheduled runs in a row the task pauses: its settings'
    `auto_pause_after_failures` (`cfg`) when set, else its handler's
    `AUTO_PAUSE_AFTER_FAILURES`; None: never."""
    value = getattr(cfg, "auto_pause_after_failures", None)
    return check_auto_pause(value if value is not None
                            else getattr(cls, "AUTO_PAUSE_AFTER_FAILURES", None))


def auto_pause_reason(failures: int) -> str:
    """The reason of an automatic pause: `auto: 3 failures in a row`."""
    return f"auto: {failures} failures in a row"
