"""Time sources. All instants are naive `datetime` objects in UTC.

The wall clock is read only here; everything else takes a `now` argument or a clock,
so tests drive time explicitly instead of sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


def utcnow() -> datetime:
    """Return the current time as a naive UTC datetime (microsecond precision)."""
    return datetime.now(UTC).replace(tzinfo=None)


def as_utc(value: datetime) -> datetime:
    """Convert an aware datetime to naive UTC; a naive one is taken to be UTC already."""
    if value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


class SystemClock:
    """The real clock: `now()` returns naive UTC."""

    def now(self) -> datetime:
        """Return the current naive UTC time."""
        return utcnow()


class FrozenClock:
    """A clock that moves only when told to; for tests and simulations.

    Args:
        start: the initial instant (naive UTC, or aware and converted to UTC).
    """

    def __init__(self, start: datetime) -> None:
        self._now = as_utc(start)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """Return the frozen instant (naive UTC)."""
        with self._lock:
            return self._now

    def set(self, value: datetime) -> None:
        """Jump to `value` (naive UTC or aware)."""
        with self._lock:
            self._now = as_utc(value)

    def advance(self, seconds: float) -> datetime:
        """Move forward by `seconds` and return the new instant."""
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now
