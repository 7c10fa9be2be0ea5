"""Schedule slots: which slot an instant falls in, for named frequencies and cron.

`minute`/`hour`/`day`/`month` slots are computed in UTC: the slot key is the start of
the period (`YYYYMMDDHHMM`, `YYYYMMDDHH`, `YYYYMMDD`, `YYYYMM`). A cron expression is
evaluated in the configured time zone and its slot key is the fire time as local wall
time `YYYYMMDDHHMM`. DST rule (documented in docs/architecture.md, "Time"): a fire time inside the
hour that DST skips runs once, at the next valid time (cronsim's rule); a wall time that
DST repeats runs once, because both instants share one slot key.

Cron's macros (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly` and the aliases
`@midnight`, `@annually`) mean their 5-field forms (`MACROS`): same fire times, same slot
keys, evaluated in the configured time zone like any cron expression.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from .handler import FREQUENCIES

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


def is_cron(frequency: str) -> bool:
    """True for a cron expression (not one of the named frequencies)."""
    return frequency not in FREQUENCIES


def current_slot(frequency: str, now: datetime, tz: str = "UTC") -> Slot:
    """The latest slot that has begun at `now` (naive UTC).

    For cron this is the latest fire time at or before `now`'s minute.
    """
    frequency = expand(frequency)
    if frequency in _FORMATS:
        start = _floor(frequency, now)
        return Slot(start.strftime(_FORMATS[frequency]), start, _next_start(frequency, start))
    zone = ZoneInfo(tz)
    minute = now.replace(second=0, microsecond=0)
    # Add the 30 s before converting: aware arithmetic resets `fold`, which would put a
    # tick in the repeated DST hour on the first pass of that wall time.
    local = (minute + timedelta(seconds=30)).replace(tzinfo=timezone.utc).astimezone(zone)
    fire = next(CronSim(frequency, local, reverse=True))
    later = CronSim(frequency, fire)
    following = next(later)
    while _utc(following) <= minute:  # cronsim's reverse walk can skip a fire of the
        fire, following = following, next(later)  # repeated DST hour (fold=1)
    return Slot(fire.strftime("%Y%m%d%H%M"), _utc(fire), _utc(following))


def slot_start(frequency: str, key: str, tz: str = "UTC") -> datetime | None:
    """When the slot `key` of `frequency` began, naive UTC; None when `key` is not a key
    of that frequency (the frequency was changed since). A cron key in a repeated DST
    hour is read as its first (earlier) instant."""
    frequency = expand(frequency)
    start = _parse_key(key, _KEY_LENGTHS[_FORMATS.get(frequency, "%Y%m%d%H%M")])
    if start is None:
        return None
    if frequency in _FORMATS:
        return start
    return _utc(start.replace(tzinfo=ZoneInfo(tz)))


def slots_between(frequency: str, after_key: str, slot: Slot, tz: str = "UTC",
                  limit: int = 1000) -> int:
    """How many slots lie strictly between the slot `after_key` and `slot` (for logging
    skipped slots). Named frequencies are counted by arithmetic (constant time, however
    long the gap); cron expressions are walked, counting at most `limit` (a return of
    `limit` means "at least that many")."""
    frequency = expand(frequency)
    if frequency in _FORMATS:
        prev = _parse_key(after_key, _KEY_LENGTHS[_FORMATS[frequency]])
        if prev is None:
            return 0
        if frequency == "month":
            gap = (slot.at.year - prev.year) * 12 + slot.at.month - prev.month
        else:
            step = {"minute": 60, "hour": 3600, "day": 86400}[frequency]
            gap = int((slot.at - prev).total_seconds() // step)
        return max(0, gap - 1)
    zone = ZoneInfo(tz)
    prev = _parse_key(after_key, 12)
    if prev is None:
        return 0
    prev = prev.replace(tzinfo=zone)
    count, keys = 0, {after_key}
    for fire in CronSim(frequency, prev):
        if _utc(fire) >= slot.at or count >= limit:
            break
        key = fire.strftime("%Y%m%d%H%M")
        if key not in keys:
            keys.add(key)
            count += 1
    return count


_KEY_LENGTHS = {"%Y%m%d%H%M": 12, "%Y%m%d%H": 10, "%Y%m%d": 8, "%Y%m": 6}


def _parse_key(key: str, length: int) -> datetime | None:
    """A slot key (`YYYYMM[DD[HH[MM]]]`) as a datetime; None unless it has `length` digits.
    (strptime costs ~40 µs; a tick over a thousand tasks parses a thousand keys.)"""
    if not isinstance(key, str) or len(key) != length or not key.isdigit():
        return None
    try:
        return datetime(int(key[:4]), int(key[4:6]), int(key[6:8] or 1),
                        int(key[8:10] or 0), int(key[10:12] or 0))
    except ValueError:
        return None


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
    return value.astimezone(timezone.utc).replace(tzinfo=None)
