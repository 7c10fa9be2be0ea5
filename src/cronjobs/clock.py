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


def parse_utc(value: str) -> datetime:
    """`value`, an ISO 8601 time (UTC if naive; `Z` allowed), as a naive UTC datetime:
    the one reading of a time typed by a person (`dispatch --at`, `POST /api/jobs`).

    Raises:
        ValueError: "not an ISO 8601 time", or "out of range (1970 to 9998)" (callers
            add the value as they show it).
    """
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("not an ISO 8601 time") from None
    try:
        parsed = as_utc(parsed)
    except OverflowError:  # e.g. 0001-01-01T00:00+05:00 has no UTC datetime
        parsed = datetime.min
    if not datetime(1970, 1, 1) <= parsed < datetime(9999, 1, 1):
        raise ValueError("out of range (1970 to 9998)")
    return parsed


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
