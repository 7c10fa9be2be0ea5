"""Schedule slots: which slot an instant falls in, for named frequencies and cron.

`minute`/`hour`/`day`/`month` slots are computed in UTC: the slot key is the start of
the period (`YYYYMMDDHHMM`, `YYYYMMDDHH`, `YYYYMMDD`, `YYYYMM`). A cron expression is
evaluated in the configured time zone with cronsim, whose fire instants are the schedule;
its slot key is the fire time as local wall time `YYYYMMDDHHMM`, and a fire in the second
pass of a wall time that DST repeats has its UTC offset appended (`202610250215+0100`), so
every fire instant has a key of its own (at most 17 characters).

DST rule (cronsim's and Debian cron's; docs/handlers.md, "Scheduling"): a line whose
minute or hour field starts with `*` (`0 * * * *`, `*/15 * * * *`, `@hourly`) keeps its
real-time interval: it fires in both passes of a repeated hour and never inside a skipped
one. A fixed-time line (`30 2 * * *`) fires once in a repeated hour (the first pass) and,
when DST skips its time, once at the next valid time. Slots are ordered and counted by
their instants, never by their keys.

Cron's macros (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly` and the aliases
`@midnight`, `@annually`) mean their 5-field forms (`MACROS`): same fire times, same slot
keys, evaluated in the configured time zone like any cron expression.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..handler import FREQUENCIES

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

_FORMATS = {"minute": "%Y%m%d%H%M", "hour": "%Y%m%d%H", "day": "%Y%m%d", "month": "%Y%m"}


@dataclass(frozen=True)
class Slot:
    """One schedule slot.

    Attributes:
        key: the slot string stored in `cronjob_slot`/`cronjob_runtime.last_slot`.
        at: when the slot began (the fire time for cron), naive UTC.
        next_at: when the next slot begins, naive UTC.
    """

    key: str
    at: datetime
    next_at: datetime


def expand(frequency: str) -> str:
    """The 5-field form of a cron macro (`@daily` -> `0 0 * * *`); anything else unchanged."""
    return MACROS.get(frequency, frequency) if isinstance(frequency, str) else frequency


def describe(frequency: str | None) -> str:
    """A frequency as shown to people: a macro with its expansion (`@daily (0 0 * * *)`),
    anything else as it is; `""` for None."""
    if not frequency:
        return ""
    return f"{frequency} ({MACROS[frequency]})" if frequency in MACROS else frequency


def check_frequency(frequency: str) -> None:
    """Raise ValueError unless `frequency` is a named frequency, a cron macro (`MACROS`)
    or a 5-field cron line."""
    if frequency in FREQUENCIES or frequency in MACROS:
        return
    if not isinstance(frequency, str) or len(frequency.split()) != 5:
        raise ValueError(f"FREQUENCY {frequency!r} must be minute, hour, day, month, a cron "
                         f"macro ({', '.join(MACROS)}) or a 5-field cron expression like "
                         f"'*/5 * * * *'")
    try:
        CronSim(frequency, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise ValueError(f"FREQUENCY {frequency!r} is not a valid cron expression: {exc}") from None


def check_zone(value: object, name: str = "TIMEZONE") -> str:
    """An IANA time zone name, checked.

    Args:
        value: the zone (`"Europe/Istanbul"`).
        name: what the value is, for the error (`TIMEZONE`, `[tasks.x] timezone`).

    Returns:
        `value` unchanged.

    Raises:
        ValueError: one line naming `name` and the value: not text or no such zone.
    """
    if isinstance(value, str) and value and "\x00" not in value:
        try:
            ZoneInfo(value)
            return value
        except (ZoneInfoNotFoundError, ValueError):
            pass
    raise ValueError(f"{name} {value!r:.60} is not a known IANA time zone (such as "
                     f"'Europe/Istanbul' or 'UTC')")


def is_cron(frequency: str) -> bool:
    """True for a cron expression (not one of the named frequencies)."""
    return frequency not in FREQUENCIES


def current_slot(frequency: str, now: datetime, tz: str = "UTC") -> Slot:
    """The latest slot that has begun at `now`.

    Args:
        frequency: a named frequency, a cron line or a macro (see `check_frequency`).
        now: naive UTC.
        tz: the IANA zone cron lines are read in; named frequencies ignore it.

    Returns:
        A `Slot`. For cron, `at` is the latest fire instant at or before `now`'s minute
        and `next_at` the fire instant after it, in real time: in a night that repeats
        02:00-03:00, the first 02:00 of `0 * * * *` is followed by its second 02:00.
    """
    frequency = expand(frequency)
    if frequency in _FORMATS:
        start = _floor(frequency, now)
        return Slot(start.strftime(_FORMATS[frequency]), start, _next_start(frequency, start))
    zone = ZoneInfo(tz)
    minute = now.replace(second=0, microsecond=0)
    # Add the 30 s before converting: aware arithmetic resets `fold`, which would put a
    # tick in the repeated DST hour on the first pass of that wall time.
    local = (minute + timedelta(seconds=30)).replace(tzinfo=UTC).astimezone(zone)
    fire = _utc(next(CronSim(frequency, local, reverse=True)))
    later = fires_after(frequency, fire, tz)
    following = next(later)
    while following <= minute:  # cronsim's reverse walk can skip a fire of the
        fire, following = following, next(later)  # repeated DST hour (fold=1)
    return Slot(cron_key(fire, zone), fire, following)


def fires_after(frequency: str, after: datetime, tz: str = "UTC") -> Iterator[datetime]:
    """The fire instants of the cron line `frequency` strictly after `after`, in order.

    Args:
        frequency: a cron line or macro.
        after: naive UTC.
        tz: the IANA zone the line is read in.

    Yields:
        Naive UTC instants, each later than the one before (cronsim's fire times; a wall
        time of a repeated hour is yielded twice for a line with a `*` minute or hour
        field, once for a fixed-time line).
    """
    zone = ZoneInfo(tz)
    last = after
    for fire in CronSim(expand(frequency), after.replace(tzinfo=UTC).astimezone(zone)):
        at = _utc(fire)
        if at > last:  # a fixed-time line is walked in wall time: skip what lies behind
            last = at
            yield at


def cron_key(at: datetime, zone: ZoneInfo) -> str:
    """The slot key of the cron fire instant `at` (naive UTC) in `zone`: the local wall
    time `YYYYMMDDHHMM`, with the UTC offset appended (`+0100`, `-0500`) when `at` is the
    second pass of a wall time that DST repeats."""
    local = at.replace(tzinfo=UTC).astimezone(zone)
    key = local.strftime("%Y%m%d%H%M")
    if local.fold and local.replace(fold=0).utcoffset() != local.utcoffset():
        key += local.strftime("%z")
    return key


def slot_start(frequency: str, key: str, tz: str = "UTC") -> datetime | None:
    """When the slot `key` of `frequency` began, naive UTC; None when `key` is not a key
    of that frequency (the frequency was changed since). A cron key without an offset
    names the first pass of a repeated wall time; one with an offset (`+0100`) names the
    instant at that offset."""
    frequency = expand(frequency)
    if frequency in _FORMATS:
        return _parse_key(key, _KEY_LENGTHS[_FORMATS[frequency]])
    if not isinstance(key, str):
        return None
    wall, offset = _parse_key(key[:12], 12), _parse_offset(key[12:])
    if wall is None or offset is None:
        return None
    if key[12:]:
        return wall - offset
    return _utc(wall.replace(tzinfo=ZoneInfo(tz)))


@lru_cache(maxsize=1024)  # schedule entries that share a cron line share the count
def slots_between(frequency: str, after_key: str, slot: Slot, tz: str = "UTC",
                  limit: int = 1000) -> int:
    """How many slots lie strictly between the slot `after_key` and `slot` (for logging
    skipped slots), counted in fire instants: both passes of a repeated hour count for a
    line that fires in both. Named frequencies are counted by arithmetic (constant time,
    however long the gap); cron expressions are walked, counting at most `limit` (a
    return of `limit` means "at least that many"). An unreadable `after_key` counts 0."""
    frequency = expand(frequency)
    prev = slot_start(frequency, after_key, tz)
    if prev is None:
        return 0
    if frequency == "month":
        return max(0, (slot.at.year - prev.year) * 12 + slot.at.month - prev.month - 1)
    if frequency in _FORMATS:
        step = {"minute": 60, "hour": 3600, "day": 86400}[frequency]
        return max(0, int((slot.at - prev).total_seconds() // step) - 1)
    count = 0
    for at in fires_after(frequency, prev, tz):
        if at >= slot.at or count >= limit:
            break
        count += 1
    return count


_KEY_LENGTHS = {"%Y%m%d%H%M": 12, "%Y%m%d%H": 10, "%Y%m%d": 8, "%Y%m": 6}


def _parse_key(key: str, length: int) -> datetime | None:
    """A slot key (`YYYYMM[DD[HH[MM]]]`) as a datetime; None unless it has `length` digits.
    (not strptime, slow for this: a tick over a thousand tasks parses a thousand keys.)"""
    if not isinstance(key, str) or len(key) != length or not key.isdigit():
        return None
    try:
        return datetime(int(key[:4]), int(key[4:6]), int(key[6:8] or 1),
                        int(key[8:10] or 0), int(key[10:12] or 0))
    except ValueError:
        return None


def _parse_offset(suffix: str) -> timedelta | None:
    """A cron key's offset suffix (`+0100`, `-0500`) as a timedelta; `""` is zero; None
    for anything else."""
    if not suffix:
        return timedelta(0)
    if len(suffix) != 5 or suffix[0] not in "+-" or not suffix[1:].isdigit():
        return None
    offset = timedelta(hours=int(suffix[1:3]), minutes=int(suffix[3:5]))
    return -offset if suffix[0] == "-" else offset


def _floor(frequency: str, now: datetime) -> datetime:
    start = now.replace(second=0, microsecond=0)
    if frequency in ("hour", "day", "month"):
        start = start.replace(minute=0)
    if frequency in ("day", "month"):
        start = start.replace(hour=0)
    if frequency == "month":
        start = start.replace(day=1)
    return start


def _next_start(frequency: str, start: datetime) -> datetime:
    if frequency == "minute":
        return start + timedelta(minutes=1)
    if frequency == "hour":
        return start + timedelta(hours=1)
    if frequency == "day":
        return start + timedelta(days=1)
    return (start.replace(day=28) + timedelta(days=4)).replace(day=1)


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None)
