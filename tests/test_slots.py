"""Which slot an instant falls in (named frequencies in UTC, cron in a time zone),
frequency validation, DST rules and the count of skipped slots."""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from cronjobs import limits
from cronjobs.schedule.slots import (
    Slot,
    check_frequency,
    cron_key,
    current_slot,
    expand,
    is_cron,
    slot_start,
    slots_between,
)

BERLIN = "Europe/Berlin"


def minutes(start: datetime, end: datetime):
    """Every minute from `start` (included) to `end` (excluded), at second 30."""
    cursor = start.replace(second=30)
    while cursor < end:
        yield cursor
        cursor += timedelta(minutes=1)


def first_seen(frequency: str, start: datetime, end: datetime, tz: str) -> dict[str, datetime]:
    """Slot key -> the first minute (UTC) a tick would see it, over [start, end)."""
    seen: dict[str, datetime] = {}
    for now in minutes(start, end):
        seen.setdefault(current_slot(frequency, now, tz).key, now.replace(second=0))
    return seen


# -- named frequencies ------------------------------------------------------------------

@pytest.mark.parametrize("frequency, key, at, next_at", [
    ("minute", "202601051234", datetime(2026, 1, 5, 12, 34), datetime(2026, 1, 5, 12, 35)),
    ("hour", "2026010512", datetime(2026, 1, 5, 12, 0), datetime(2026, 1, 5, 13, 0)),
    ("day", "20260105", datetime(2026, 1, 5), datetime(2026, 1, 6)),
    ("month", "202601", datetime(2026, 1, 1), datetime(2026, 2, 1)),
])
def test_named_frequency_slot_key_and_next(frequency, key, at, next_at):
    slot = current_slot(frequency, datetime(2026, 1, 5, 12, 34, 56, 789))
    assert slot == Slot(key, at, next_at)


@pytest.mark.parametrize("frequency, key, next_at", [
    ("minute", "202612312359", datetime(2027, 1, 1, 0, 0)),
    ("hour", "2026123123", datetime(2027, 1, 1, 0, 0)),
    ("day", "20261231", datetime(2027, 1, 1)),
    ("month", "202612", datetime(2027, 1, 1)),
])
def test_year_end_rolls_over_to_january(frequency, key, next_at):
    slot = current_slot(frequency, datetime(2026, 12, 31, 23, 59, 59))
    assert (slot.key, slot.next_at) == (key, next_at)


@pytest.mark.parametrize("now, next_at", [
    (datetime(2026, 1, 31, 10, 0), datetime(2026, 2, 1)),   # 31-day month
    (datetime(2028, 2, 29, 10, 0), datetime(2028, 3, 1)),   # leap February
    (datetime(2026, 2, 28, 10, 0), datetime(2026, 3, 1)),   # short February
    (datetime(2026, 4, 30, 10, 0), datetime(2026, 5, 1)),   # 30-day month
])
def test_month_next_at_is_the_first_of_the_next_month(now, next_at):
    assert current_slot("month", now).next_at == next_at


def test_named_slot_starts_exactly_on_the_boundary():
    assert current_slot("hour", datetime(2026, 1, 5, 13, 0, 0)).key == "2026010513"
    assert current_slot("hour", datetime(2026, 1, 5, 12, 59, 59, 999999)).key == "2026010512"


def test_named_frequencies_ignore_the_time_zone():
    """minute/hour/day/month slots are UTC whatever CRONJOBS_TIMEZONE says."""
    now = datetime(2026, 1, 5, 23, 30)  # already Jan 6 in Berlin
    assert current_slot("day", now, BERLIN) == current_slot("day", now, "UTC")
    assert current_slot("day", now, BERLIN).key == "20260105"


# -- cron -----------------------------------------------------------------------------

@pytest.mark.parametrize("now, key, at, next_at", [
    (datetime(2026, 1, 5, 12, 7, 30), "202601051205", datetime(2026, 1, 5, 12, 5),
     datetime(2026, 1, 5, 12, 10)),
    (datetime(2026, 1, 5, 12, 10, 0), "202601051210", datetime(2026, 1, 5, 12, 10),
     datetime(2026, 1, 5, 12, 15)),
    (datetime(2026, 1, 5, 12, 14, 59), "202601051210", datetime(2026, 1, 5, 12, 10),
     datetime(2026, 1, 5, 12, 15)),
    (datetime(2026, 12, 31, 23, 58), "202612312355", datetime(2026, 12, 31, 23, 55),
     datetime(2027, 1, 1, 0, 0)),
])
def test_cron_every_five_minutes_latest_fire_at_or_before_now(now, key, at, next_at):
    assert current_slot("*/5 * * * *", now) == Slot(key, at, next_at)


@pytest.mark.parametrize("now, key", [
    (datetime(2026, 1, 5, 3, 14, 59), "202601040315"),   # before today's fire: yesterday's
    (datetime(2026, 1, 5, 3, 15, 0), "202601050315"),    # the fire minute itself
    (datetime(2026, 1, 5, 22, 0), "202601050315"),
])
def test_cron_daily_latest_fire_at_or_before_now(now, key):
    slot = current_slot("15 3 * * *", now)
    assert slot.key == key
    assert slot.at == datetime.strptime(key, "%Y%m%d%H%M")
    assert slot.next_at == slot.at + timedelta(days=1)


def test_cron_is_evaluated_in_the_configured_time_zone():
    """03:15 in Berlin in winter (UTC+1) is 02:15 UTC; the key is the local wall time."""
    slot = current_slot("15 3 * * *", datetime(2026, 1, 5, 2, 15), BERLIN)
    assert slot == Slot("202601050315", datetime(2026, 1, 5, 2, 15), datetime(2026, 1, 6, 2, 15))
    assert current_slot("15 3 * * *", datetime(2026, 1, 5, 2, 14), BERLIN).key == "202601040315"
    summer = current_slot("15 3 * * *", datetime(2026, 7, 5, 1, 15), BERLIN)
    assert (summer.key, summer.at) == ("202607050315", datetime(2026, 7, 5, 1, 15))


def test_is_cron():
    assert not any(is_cron(f) for f in ("minute", "hour", "day", "month"))
    assert is_cron("*/5 * * * *")


# -- check_frequency --------------------------------------------------------------------

@pytest.mark.parametrize("frequency", ["minute", "hour", "day", "month", "*/5 * * * *",
                                       "15 3 * * *", "0 0 1 * *", "30 2 * * 1-5"])
def test_check_frequency_accepts(frequency):
    assert check_frequency(frequency) is None


@pytest.mark.parametrize("frequency, words", [
    ("every minute", "5-field"),
    ("* * * * * *", "5-field"),        # 6 fields (seconds) are not cron here
    ("*/5 * * *", "5-field"),
    ("61 * * * *", "not a valid cron"),
    ("* 25 * * *", "not a valid cron"),
    ("", "5-field"),
    ("Minute", "5-field"),
])
def test_check_frequency_rejects(frequency, words):
    with pytest.raises(ValueError, match=words) as info:
        check_frequency(frequency)
    assert repr(frequency) in str(info.value)


# -- DST (Europe/Berlin) ----------------------------------------------------------------

def test_spring_forward_daily_fire_in_the_skipped_hour_runs_once_at_three():
    """2026-03-29: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist that day.
    The daily 02:30 task runs once, at 03:00 local (01:00 UTC), the next valid time."""
    day_start, day_end = datetime(2026, 3, 28, 23, 0), datetime(2026, 3, 29, 22, 0)  # local day
    seen = first_seen("30 2 * * *", day_start, day_end, BERLIN)
    new = {key: at for key, at in seen.items() if key.startswith("20260329")}
    assert new == {"202603290300": datetime(2026, 3, 29, 1, 0)}
    slot = current_slot("30 2 * * *", datetime(2026, 3, 29, 1, 0), BERLIN)
    assert slot.at == datetime(2026, 3, 29, 1, 0)                 # 03:00 CEST
    assert slot.next_at == datetime(2026, 3, 30, 0, 30)           # 02:30 CEST next day
    # the days around it are normal
    assert current_slot("30 2 * * *", datetime(2026, 3, 28, 1, 30), BERLIN).key == "202603280230"
    assert current_slot("30 2 * * *", datetime(2026, 3, 30, 0, 30), BERLIN).key == "202603300230"


def test_autumn_repeated_hour_fires_both_passes_of_a_wildcard_line():
    """2026-10-25: 03:00 CEST goes back to 02:00 CET, so 02:00 and 02:30 happen twice.
    `*/30 * * * *` keeps its 30-minute interval: eight fire instants in four real hours,
    each with a key of its own; the second pass carries its UTC offset."""
    start, end = datetime(2026, 10, 24, 23, 0), datetime(2026, 10, 25, 3, 0)
    seen = first_seen("*/30 * * * *", start, end, BERLIN)
    assert list(seen) == ["202610250100", "202610250130", "202610250200", "202610250230",
                          "202610250200+0100", "202610250230+0100", "202610250300",
                          "202610250330"]
    assert list(seen.values()) == [start + timedelta(minutes=30 * n) for n in range(8)]
    first = current_slot("*/30 * * * *", datetime(2026, 10, 25, 0, 10), BERLIN)
    second = current_slot("*/30 * * * *", datetime(2026, 10, 25, 1, 10), BERLIN)
    assert (first.key, first.at, first.next_at) == (
        "202610250200", datetime(2026, 10, 25, 0, 0), datetime(2026, 10, 25, 0, 30))
    assert (second.key, second.at, second.next_at) == (
        "202610250200+0100", datetime(2026, 10, 25, 1, 0), datetime(2026, 10, 25, 1, 30))


def test_autumn_repeated_hour_fires_a_fixed_time_line_once():
    """`30 2 * * *` fires at the first 02:30 (00:30 UTC) only; in the second pass the
    current slot is still that one, so a tick there finds it already run."""
    start, end = datetime(2026, 10, 24, 23, 0), datetime(2026, 10, 25, 3, 0)
    seen = first_seen("30 2 * * *", start, end, BERLIN)
    assert seen == {"202610240230": start, "202610250230": datetime(2026, 10, 25, 0, 30)}
    second_pass = current_slot("30 2 * * *", datetime(2026, 10, 25, 1, 40), BERLIN)
    assert (second_pass.key, second_pass.at, second_pass.next_at) == (
        "202610250230", datetime(2026, 10, 25, 0, 30), datetime(2026, 10, 26, 1, 30))


@pytest.mark.parametrize("at, tz, key", [
    (datetime(2026, 10, 25, 0, 15), BERLIN, "202610250215"),              # first pass
    (datetime(2026, 10, 25, 1, 15), BERLIN, "202610250215+0100"),         # second pass
    (datetime(2026, 10, 25, 2, 15), BERLIN, "202610250315"),
    (datetime(2026, 11, 1, 5, 30), "America/New_York", "202611010130"),
    (datetime(2026, 11, 1, 6, 30), "America/New_York", "202611010130-0500"),
    (datetime(2026, 4, 4, 15, 15), "Australia/Lord_Howe", "202604050145+1030"),  # 30 min
    (datetime(2026, 10, 25, 1, 15), "UTC", "202610250115"),
])
def test_cron_key_names_each_instant_and_reads_back(at, tz, key):
    assert cron_key(at, ZoneInfo(tz)) == key
    assert slot_start("*/15 * * * *", key, tz) == at
    assert len(key) <= 32  # the slot column


def test_the_longest_cron_key_fits_the_slot_column_and_the_run_key():
    """A second-pass key has 17 characters; with the longest task name the run's
    idempotency key `cronjobs:<task>:<slot>` still fits its column."""
    longest = cron_key(datetime(2026, 10, 25, 1, 15), ZoneInfo(BERLIN))
    assert len(longest) == 17 <= 32
    assert len(f"cronjobs:{'t' * limits.TYPE_MAX_CHARS}:{longest}") <= limits.KEY_MAX_CHARS


@pytest.mark.parametrize("key", ["202610250215+01", "202610250215 0100", "202610250215+01:00",
                                 "2026102502150100", "20261025021+0100", "202613250215"])
def test_slot_start_refuses_a_malformed_cron_key(key):
    assert slot_start("*/15 * * * *", key, BERLIN) is None


def test_second_pass_keys_sort_wrongly_as_strings_so_slots_compare_instants():
    """The reason slot order is never decided on keys: the second 02:15 sorts before
    the first 02:30 as a string, but comes an hour later."""
    second_215 = slot_start("*/15 * * * *", "202610250215+0100", BERLIN)
    first_230 = slot_start("*/15 * * * *", "202610250230", BERLIN)
    assert "202610250215+0100" < "202610250230" and second_215 > first_230


@pytest.mark.parametrize("frequency", ["*/30 * * * *", "30 2 * * *", "0 2 * * *",
                                       "15,45 * * * *", "*/7 2 * * *", "0 * * * *"])
@pytest.mark.parametrize("start, end", [
    (datetime(2026, 10, 24, 21, 0), datetime(2026, 10, 25, 4, 0)),  # autumn
    (datetime(2026, 3, 28, 22, 0), datetime(2026, 3, 29, 4, 0)),    # spring
], ids=["autumn", "spring"])
def test_cron_slot_brackets_now_across_dst(frequency, start, end):
    """At every minute the slot began at or before now, the next one lies ahead, and
    neither moves backwards (the dashboard's next run is never in the past)."""
    previous = None
    for now in minutes(start, end):
        slot = current_slot(frequency, now, BERLIN)
        assert slot.at <= now < slot.next_at, (now, slot)
        if previous is not None:
            assert slot.at >= previous.at and slot.next_at >= previous.next_at, (now, slot)
        previous = slot


def cronsim_instants(frequency: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """cronsim's own fire instants (naive UTC) from a day before `start` to a day after `end`."""
    zone = ZoneInfo(tz)
    begin = (start - timedelta(days=1)).replace(tzinfo=UTC).astimezone(zone)
    out = []
    for fire in CronSim(expand(frequency), begin):
        out.append(fire.astimezone(UTC).replace(tzinfo=None))
        if out[-1] > end + timedelta(days=1):
            return out
    return out


@pytest.mark.parametrize("frequency", ["0 * * * *", "*/15 * * * *", "@hourly", "30 2 * * *",
                                       "0 2 * * *", "30 1 * * *", "*/7 2 * * *",
                                       "15,45 * * * *", "5 0-23 * * *", "0 0 * * *"])
@pytest.mark.parametrize("tz, start", [
    (BERLIN, datetime(2026, 10, 24, 22)), ("America/New_York", datetime(2026, 11, 1, 3)),
    (BERLIN, datetime(2026, 3, 28, 22)), ("America/New_York", datetime(2026, 3, 8, 4)),
    ("America/Santiago", datetime(2026, 4, 5, 1)),  # DST ends at midnight there
], ids=["berlin-fall", "newyork-fall", "berlin-spring", "newyork-spring", "santiago-fall"])
def test_cron_slot_is_cronsims_fire_instant_at_every_minute(frequency, tz, start):
    """At each minute of five hours around a transition, the slot is the latest of
    cronsim's fire instants at or before it and `next_at` the one after; each instant has
    one key, which reads back as that instant."""
    end = start + timedelta(hours=5)
    fires = cronsim_instants(frequency, tz, start, end)
    keys: dict[str, datetime] = {}
    for now in minutes(start, end):
        slot = current_slot(frequency, now, tz)
        index = bisect_right(fires, now) - 1
        assert (slot.at, slot.next_at) == (fires[index], fires[index + 1]), (now, slot)
        assert keys.setdefault(slot.key, slot.at) == slot.at, (now, slot)
        assert slot_start(frequency, slot.key, tz) == slot.at


# -- slots_between ----------------------------------------------------------------------

@pytest.mark.parametrize("frequency, after, now, count", [
    ("minute", "202601051200", datetime(2026, 1, 5, 12, 30), 29),
    ("minute", "202601051229", datetime(2026, 1, 5, 12, 30), 0),
    ("minute", "202601051230", datetime(2026, 1, 5, 12, 30), 0),
    ("hour", "2026010500", datetime(2026, 1, 5, 5, 10), 4),
    ("day", "20260130", datetime(2026, 2, 2, 8, 0), 2),
    ("month", "202611", datetime(2027, 2, 10), 2),
    ("*/5 * * * *", "202601051200", datetime(2026, 1, 5, 12, 30), 5),
    ("15 3 * * *", "202601010315", datetime(2026, 1, 5, 3, 15), 3),
])
def test_slots_between_counts_skipped_slots(frequency, after, now, count):
    assert slots_between(frequency, after, current_slot(frequency, now)) == count


def test_slots_between_counts_both_passes_of_a_repeated_hour():
    slot = current_slot("*/30 * * * *", datetime(2026, 10, 25, 2, 0), BERLIN)  # 03:00 CET
    assert slot.key == "202610250300"
    # 02:00, 02:30 (CEST), 02:00, 02:30 (CET): four instants not run
    assert slots_between("*/30 * * * *", "202610250130", slot, BERLIN) == 4
    assert slots_between("*/30 * * * *", "202610250230", slot, BERLIN) == 2
    assert slots_between("*/30 * * * *", "202610250230+0100", slot, BERLIN) == 0
    second = current_slot("*/30 * * * *", datetime(2026, 10, 25, 1, 0), BERLIN)
    assert slots_between("*/30 * * * *", "202610250230", second, BERLIN) == 0
    # a fixed-time line fires once in the fold: nothing missed in the second pass
    daily = current_slot("30 2 * * *", datetime(2026, 10, 26, 1, 30), BERLIN)
    assert slots_between("30 2 * * *", "202610240230", daily, BERLIN) == 1


def test_slots_between_over_the_spring_gap():
    slot = current_slot("*/30 * * * *", datetime(2026, 3, 29, 1, 30), BERLIN)  # 03:30 CEST
    assert slot.key == "202603290330"
    assert slots_between("*/30 * * * *", "202603290130", slot, BERLIN) == 1  # 03:00 only


def test_slots_between_is_capped_and_tolerates_bad_keys():
    slot = current_slot("minute", datetime(2027, 1, 1))
    assert slots_between("minute", "202601010000", slot) == 525_599, "counted, not walked"
    assert slots_between("month", "202501", current_slot("month", datetime(2027, 1, 5))) == 23
    assert slots_between("*/5 * * * *", "202601010000",
                         current_slot("*/5 * * * *", datetime(2027, 1, 1)), limit=100) == 100
    assert slots_between("minute", "not-a-slot", slot) == 0
    assert slots_between("*/5 * * * *", "garbage", current_slot("*/5 * * * *", slot.at)) == 0
