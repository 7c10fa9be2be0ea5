"""Cron macros (@hourly ... @yearly) mean cron's five-field forms: the same fire
times over a whole year (checked against an independent calendar walk, in UTC and in time
zones with and without DST), the same slot keys, and the scheduler starts them alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cronjobs import CronJobHandler
from cronjobs.config import Settings
from cronjobs.errors import ConfigError
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.slots import MACROS, check_frequency, current_slot, describe

FIVE_FIELD = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0",
              "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *"}


def fire_times(frequency: str, tz: str, year: int) -> list[tuple[str, datetime]]:
    """(slot key, fire time in UTC) of every slot whose fire time falls in `year` (local),
    found the way the scheduler finds them: the current slot, then its `next_at`."""
    zone = ZoneInfo(tz)
    start = datetime(year, 1, 1, tzinfo=zone).astimezone(UTC).replace(tzinfo=None)
    end = datetime(year + 1, 1, 1, tzinfo=zone).astimezone(UTC).replace(tzinfo=None)
    slot = current_slot(frequency, start, tz)
    out = []
    while slot.at < end:
        if slot.at >= start and (not out or out[-1][0] != slot.key):
            out.append((slot.key, slot.at))
        slot = current_slot(frequency, slot.next_at, tz)
    return out


def calendar(macro: str, tz: str, year: int) -> list[str]:
    """The local wall times (`YYYYMMDDHHMM`) cron fires `macro` at in `year`, computed
    with plain calendar arithmetic (no cron library)."""
    zone = ZoneInfo(tz)
    if macro == "@hourly":
        out, day = [], datetime(year, 1, 1)
        while day.year == year:
            for hour in range(24):
                wall = day.replace(hour=hour)
                # an hour that DST skips does not exist; cronsim runs it at the next
                # valid time, which is the following hour's fire: same run, once
                roundtrip = wall.replace(tzinfo=zone).astimezone(UTC).astimezone(zone)
                if roundtrip.replace(tzinfo=None) == wall:
                    out.append(wall.strftime("%Y%m%d%H%M"))
                # an hour that DST repeats happens twice: a wildcard hour field fires in
                # both passes, the second one keyed with its UTC offset
                second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC).astimezone(zone)
                if second.fold and second.replace(tzinfo=None, fold=0) == wall:
                    out.append(wall.strftime("%Y%m%d%H%M") + second.strftime("%z"))
            day += timedelta(days=1)
        return out
    days = [datetime(year, 1, 1) + timedelta(days=n) for n in range(366)]
    days = [d for d in days if d.year == year]
    keep = {"@daily": lambda d: True, "@weekly": lambda d: d.isoweekday() == 7,
            "@monthly": lambda d: d.day == 1, "@yearly": lambda d: (d.month, d.day) == (1, 1)}
    return [d.strftime("%Y%m%d%H%M") for d in days if keep[macro](d)]


@pytest.mark.parametrize("tz", ["UTC", "Europe/Istanbul", "America/New_York"])
@pytest.mark.parametrize("macro", sorted(FIVE_FIELD))
def test_macro_fires_like_its_five_field_form_over_a_year(macro, tz):
    fires = fire_times(macro, tz, 2026)
    assert fires == fire_times(FIVE_FIELD[macro], tz, 2026)
    assert [key for key, _ in fires] == calendar(macro, tz, 2026)
    # a year of real hours: New York's skipped 02:00 and its second 01:00 cancel out
    expected = {"@hourly": 8760, "@daily": 365,
                "@weekly": 52, "@monthly": 12, "@yearly": 1}[macro]
    assert len(fires) == expected


def test_aliases_and_the_macro_table():
    assert {k: v for k, v in MACROS.items() if k in FIVE_FIELD} == FIVE_FIELD
    assert MACROS["@midnight"] == MACROS["@daily"] and MACROS["@annually"] == MACROS["@yearly"]
    for macro in MACROS:
        check_frequency(macro)
    assert describe("@weekly") == "@weekly (0 0 * * 0)"
    assert describe("*/5 * * * *") == "*/5 * * * *" and describe(None) == ""


@pytest.mark.parametrize("bad", ["@reboot", "@every5m", "@Daily", "@"])
def test_other_at_words_are_refused_with_the_list(bad):
    with pytest.raises(ValueError, match=r"must be minute, hour, day, month, a cron macro "
                                         r"\(@hourly, @daily"):
        check_frequency(bad)
    with pytest.raises(ConfigError, match="frequency"):
        Settings.load({}, tasks={"x": {"frequency": bad}})


class MacroDailyDiscover(CronJobHandler):
    TYPE = "macro.daily.discover"
    FREQUENCY = "@daily"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True


class PlainDailyDiscover(CronJobHandler):
    TYPE = "plain.daily.discover"
    FREQUENCY = "0 0 * * *"
    OVERLAP = "allow"  # slot tests: every slot starts, whatever the last run does

    def handle(self, payload, job):
        return True


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_scheduler_starts_a_macro_task_at_the_same_ticks_and_slots(make_app):
    app = make_app(timezone="Europe/Istanbul")
    app.handlers.register(MacroDailyDiscover.TYPE, MacroDailyDiscover)
    app.handlers.register(PlainDailyDiscover.TYPE, PlainDailyDiscover)
    starts: dict[str, list[str]] = {"macro-daily": [], "plain-daily": []}
    now = datetime(2026, 3, 1, 18, 0)  # 21:00 in Istanbul (UTC+3)
    for _ in range(4 * 24 // 3):       # every 3 hours for four days
        for task, slot, _job in tick(now, app=app).started:
            if task in starts:
                starts[task].append(slot)
        now += timedelta(hours=3)
    # a new cron task waits for its first fire time, then runs once per local midnight
    assert starts["macro-daily"] == starts["plain-daily"] == [
        "202603020000", "202603030000", "202603040000", "202603050000"]
