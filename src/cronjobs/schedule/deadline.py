"""STARTING_DEADLINE: how long after its slot a task's scheduled run may still start.

A handler's `STARTING_DEADLINE` (`"2m"`, 120, a timedelta; `[tasks.<task>]
starting_deadline` wins) gives each slot row of its task `expires_at = scheduled_at +
deadline` (`schedule.scheduler`): a row still pending then (a paused queue, a full
limit, no worker) is never claimed and ends `expired` (`job.expiry`), counted as a skip
of its slot (reason `expired`). The value is read once, here, by the registry (at
registration), the settings and the task list.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..durations import seconds


def check_starting_deadline(value: object, name: str = "STARTING_DEADLINE") -> float | None:
    """A starting deadline in seconds (> 0, at most a year); None for None (no deadline).

    Args:
        value: seconds (int or float), text (`"90s"`, `"2m"`, `"1h"`) or a timedelta.
        name: what it is, for the error (`STARTING_DEADLINE`, `[tasks.x] starting_deadline`).

    Raises:
        ValueError: one line naming `name` and the value.
    """
    return None if value is None else seconds(value, name=name)


def starting_deadline(handler: type, setting: float | str | timedelta | None = None
                      ) -> float | None:
    """The starting deadline of a task in seconds: its settings' `starting_deadline` when
    given, else its handler's `STARTING_DEADLINE`; None: its rows never expire.

    Raises:
        ValueError: a value that is not a duration (checked at registration and when the
            settings load, so only a class changed since).
    """
    if setting is not None:
        return check_starting_deadline(setting, "starting_deadline")
    return check_starting_deadline(getattr(handler, "STARTING_DEADLINE", None))


def expires_after(slot_at: datetime, deadline_seconds: float | None) -> datetime | None:
    """The `expires_at` of a slot's row: the slot's time (naive UTC) plus the task's
    starting deadline (seconds); None without a deadline."""
    if deadline_seconds is None:
        return None
    return slot_at + timedelta(seconds=deadline_seconds)
