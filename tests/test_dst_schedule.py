"""Across the DST nights of Berlin and New York, `tick` starts exactly cronsim's fire instants:
`*`-minute/hour lines in both passes of a repeated hour, fixed-time lines once, named
frequencies once per UTC period; no false missed or lost-race lines; host TZ changes nothing."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from cronsim import CronSim

from conftest import SAMPLE_HANDLERS, cli_env, new_database
from cronjobs.clock import FrozenClock
from cronjobs.migrate import upgrade
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.slots import expand, is_cron, slot_start
from cronjobs.schedule.tasks import task_infos
from cronjobs.store.engines import make_engine
from cronjobs.store.models import cronjob_queue, cronjob_slot

DST_HANDLERS = str(Path(__file__).parent / "dst_handlers")
HANDLER_PATHS = (SAMPLE_HANDLERS, DST_HANDLERS)
PROCS = Path(__file__).parent / "procs"
MINUTE = timedelta(minutes=1)
BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"

# (zone, first minute driven, end), UTC: the hours around each 2026 transition.
NIGHTS = {
    "berlin-fall": (BERLIN, datetime(2026, 10, 24, 22), datetime(2026, 10, 25, 3)),      # 01:00Z
    "newyork-fall": (NEW_YORK, datetime(2026, 11, 1, 4), datetime(2026, 11, 1, 9)),      # 06:00Z
    "berlin-spring": (BERLIN, datetime(2026, 3, 28, 23), datetime(2026, 3, 29, 3)),      # 01:00Z
    "newyork-spring": (NEW_YORK, datetime(2026, 3, 8, 5), datetime(2026, 3, 8, 9)),      # 07:00Z
}
INTERVAL_MINUTES = {"dst-hourly": 60, "dst-macrohourly": 60, "dst-quarter": 15, "dst-five": 5,
                    "cronjobs-health": 5}
# The rule for fixed-time lines, written out: once in a repeated hour (its first pass),
# once at the next valid time (03:00 local) when DST skips the time. UTC instants.
FIXED = {
    "berlin-fall": {"dst-onethirty": [datetime(2026, 10, 24, 23, 30)],
                    "dst-two": [datetime(2026, 10, 25, 0, 0)],        # 02:00 CEST
                    "dst-twothirty": [datetime(2026, 10, 25, 0, 30)]},  # 02:30 CEST
    "newyork-fall": {"dst-onethirty": [datetime(2026, 11, 1, 5, 30)],  # 01:30 EDT
                     "dst-two": [datetime(2026, 11, 1, 7, 0)],
                     "dst-twothirty": [datetime(2026, 11, 1, 7, 30)]},
    "berlin-spring": {"dst-onethirty": [datetime(2026, 3, 29, 0, 30)],
                      "dst-two": [datetime(2026, 3, 29, 1, 0)],        # 03:00 CEST
                      "dst-twothirty": [datetime(2026, 3, 29, 1, 0)]},  # 03:00 CEST
    "newyork-spring": {"dst-onethirty": [datetime(2026, 3, 8, 6, 30)],
                       "dst-two": [datetime(2026, 3, 8, 7, 0)],         # 03:00 EDT
                       "dst-twothirty": [datetime(2026, 3, 8, 7, 0)]},  # 03:00 EDT
}
NAMED_FORMATS = {"minute": ("%Y%m%d%H%M", MINUTE), "hour": ("%Y%m%d%H", timedelta(hours=1)),
                 "day": ("%Y%m%d", timedelta(days=1))}


def cronsim_fires(frequency: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """cronsim's own fire instants of `frequency` in [start, end), naive UTC."""
    begin = (start - timedelta(seconds=1)).replace(tzinfo=UTC).astimezone(ZoneInfo(tz))
    fires = []
    for fire in CronSim(expand(frequency), begin):
        at = fire.astimezone(UTC).replace(tzinfo=None)
        if at >= end:
            return fires
        fires.append(at)
    return fires


def utc_periods(frequency: str, start: datetime, end: datetime) -> list[str]:
    """The keys of every UTC period of a named frequency that [start, end) touches."""
    fmt, step = NAMED_FORMATS[frequency]
    keys, cursor = [], start
    while cursor < end:
        if cursor.strftime(fmt) not in keys:
            keys.append(cursor.strftime(fmt))
        cursor += min(step, timedelta(hours=1))
    return keys


def drive(app, clock: FrozenClock, start: datetime, end: datetime) -> list:
    """Tick every minute of [start, end) at second 5, the clock moving along; the runs a
    tick starts end before the next (so `OVERLAP = "skip"` tasks start every slot too)."""
    reports, now = [], start
    while now < end:
        clock.set(now + timedelta(seconds=5))
        reports.append(tick(now + timedelta(seconds=5), app=app))
        with app.engine.begin() as conn:
            conn.execute(cronjob_queue.update().where(cronjob_queue.c.status == "pending")
                         .values(status="completed"))
        now += MINUTE
    return reports


def started_rows(app) -> dict[str, list[tuple[str, datetime, datetime]]]:
    """Task -> `(slot key, claimed at, job created at)` of every slot record, in claim order,
    each joined to the job row it started."""
    stmt = (sa.select(cronjob_slot.c.task, cronjob_slot.c.slot, cronjob_slot.c.claimed_at,
                      cronjob_queue.c.created_at)
            .join(cronjob_queue, cronjob_queue.c.id == cronjob_slot.c.job_id)
            .order_by(cronjob_slot.c.claimed_at, cronjob_slot.c.task))
    rows: dict[str, list] = {}
    with app.engine.connect() as conn:
        for task, key, claimed, created in conn.execute(stmt):
            rows.setdefault(task, []).append((key, claimed, created))
    return rows


def floor_minute(value: datetime) -> datetime:
    return value.replace(second=0, microsecond=0)


@pytest.mark.parametrize("night", list(NIGHTS))
def test_rows_started_are_cronsims_fire_instants(make_app, night, caplog):
    tz, start, end = NIGHTS[night]
    clock = FrozenClock(start)
    app = make_app(clock=clock, timezone=tz, handler_paths=HANDLER_PATHS)
    with caplog.at_level(logging.DEBUG, logger="cronjobs.schedule.scheduler"):
        reports = drive(app, clock, start, end)

    frequencies = {i.task: i.frequency for i in task_infos(app)
                   if i.frequency and i.enabled and i.available and not i.idle}
    assert set(INTERVAL_MINUTES) | set(FIXED[night]) | {"dst-utchour"} <= set(frequencies)
    rows = started_rows(app)
    for task, frequency in frequencies.items():
        got = rows.get(task, [])
        if not is_cron(frequency):  # one row per UTC period, keyed in UTC
            assert [key for key, _, _ in got] == utc_periods(frequency, start, end), task
            continue
        fires = cronsim_fires(frequency, tz, start, end)
        # exactly cronsim's instants, each started in its own fire minute: none lost, none extra
        assert [slot_start(frequency, key, tz) for key, _, _ in got] == fires, (task, got)
        assert [floor_minute(claimed) for _, claimed, _ in got] == fires, task
        assert [floor_minute(created) for _, _, created in got] == fires, task
        assert len({key for key, _, _ in got}) == len(got) and all(len(k) <= 32 for k, _, _ in got)
    for task, minutes in INTERVAL_MINUTES.items():  # the real-time interval is kept
        instants = [floor_minute(claimed) for _, claimed, _ in rows[task]]
        assert len(instants) == (end - start) // timedelta(minutes=minutes), task
        gaps = {b - a for a, b in zip(instants, instants[1:], strict=False)}
        assert gaps == {timedelta(minutes=minutes)}
    for task, instants in FIXED[night].items():  # fixed-time lines: once, as the rule says
        assert [floor_minute(claimed) for _, claimed, _ in rows[task]] == instants, task

    reasons = {reason for report in reports for reason in report.skipped.values()}
    assert "lost-race" not in reasons and "older-slot" not in reasons
    text = caplog.text
    assert "missed slot" not in text and "already claimed" not in text
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


# (night, first minute of the second pass (UTC), fixed-time tasks in the repeated hour,
#  the */15 line's second-pass keys)
SECOND_PASSES = [
    ("berlin-fall", datetime(2026, 10, 25, 1), ["dst-two", "dst-twothirty"],
     ["202610250200+0100", "202610250215+0100", "202610250230+0100", "202610250245+0100"]),
    ("newyork-fall", datetime(2026, 11, 1, 6), ["dst-onethirty"],
     ["202611010100-0500", "202611010115-0500", "202611010130-0500", "202611010145-0500"]),
]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("night, begin, fixed, quarter_keys", SECOND_PASSES,
                         ids=["berlin", "newyork"])
def test_the_second_pass_runs_wildcard_lines_and_finds_fixed_ones_already_run(
        make_app, night, begin, fixed, quarter_keys):
    tz, start, end = NIGHTS[night]
    clock = FrozenClock(start)
    app = make_app(clock=clock, timezone=tz, handler_paths=HANDLER_PATHS)
    reports = drive(app, clock, start, end)
    second_pass = [r for r in reports if begin <= r.now < begin + timedelta(hours=1)]
    assert len(second_pass) == 60
    for task in fixed:
        assert {r.skipped[task] for r in second_pass} == {"already-run"}, task
    quarter = [key for r in second_pass for t, key, _ in r.started if t == "dst-quarter"]
    assert quarter == quarter_keys


# (zone, last tick before the downtime, first tick after it, second-pass key of */15 then)
DOWNTIMES = [
    (BERLIN, datetime(2026, 10, 24, 23, 50), datetime(2026, 10, 25, 1, 20), "202610250215+0100"),
    (NEW_YORK, datetime(2026, 11, 1, 4, 50), datetime(2026, 11, 1, 6, 20), "202611010115-0500"),
]


@pytest.mark.parametrize("tz, down, back, quarter_key", DOWNTIMES, ids=["berlin", "newyork"])
def test_downtime_across_the_fold_logs_missed_instants(make_app, caplog, tz, down, back,
                                                       quarter_key):
    """Down from the first pass to the second: the run in the second pass logs the fire
    instants that were not run (both passes counted), once; the following runs log none."""
    start = down - timedelta(minutes=50)
    clock = FrozenClock(start)
    app = make_app(clock=clock, timezone=tz, handler_paths=HANDLER_PATHS)
    drive(app, clock, start, down + MINUTE)
    with caplog.at_level(logging.INFO, logger="cronjobs.schedule.scheduler"):
        drive(app, clock, back, back + 100 * MINUTE)
    missed = [r.getMessage() for r in caplog.records if "missed slot" in r.getMessage()]
    gap = back - down
    # instants strictly between the last run and the one run on return, counted in real time
    expected = {task: (back.replace(minute=back.minute - back.minute % m)
                       - down.replace(minute=down.minute - down.minute % m))
                // timedelta(minutes=m) - 1 for task, m in INTERVAL_MINUTES.items()}
    assert expected["dst-quarter"] == 5 and expected["dst-hourly"] == 1
    for task, count in expected.items():
        lines = [m for m in missed if m.startswith(f"task {task}: ")]
        assert len(lines) == 1 and lines[0].startswith(f"task {task}: {count} missed"), missed
    assert f"into {quarter_key}" in [m for m in missed if "dst-quarter" in m][0]
    assert any(m.startswith(f"task test-count: {gap // MINUTE - 1} missed") for m in missed)
    assert "already claimed" not in caplog.text


def test_a_clock_back_into_the_first_pass_starts_no_older_slot(make_app, caplog):
    """After the second 02:15 ran, the clock steps back to the first 02:40: that slot
    ("202610250230") sorts after "202610250215+0100" as a string but is older in real
    time, so it is skipped as older-slot with one WARNING; runs resume in step."""
    start, ahead = datetime(2026, 10, 25, 0, 0), datetime(2026, 10, 25, 1, 20)
    clock = FrozenClock(start)
    app = make_app(clock=clock, timezone=BERLIN, handler_paths=HANDLER_PATHS)
    drive(app, clock, start, ahead + MINUTE)
    with caplog.at_level(logging.DEBUG, logger="cronjobs.schedule.scheduler"):
        back = drive(app, clock, datetime(2026, 10, 25, 0, 40), datetime(2026, 10, 25, 0, 45))
    assert {r.skipped["dst-quarter"] for r in back} == {"older-slot"}
    assert {r.skipped["dst-hourly"] for r in back} == {"older-slot"}
    assert all(not r.started for r in back)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "the clock went back" in warnings[0]
    assert "lost-race" not in {v for r in back for v in r.skipped.values()}
    resumed = drive(app, clock, datetime(2026, 10, 25, 1, 30), datetime(2026, 10, 25, 1, 31))
    assert [k for t, k, _ in resumed[0].started if t == "dst-quarter"] == ["202610250230+0100"]


def tick_in_a_subprocess(tmp_path: Path, tz: str, host_tz: str, start: datetime,
                         end: datetime) -> list[list[str]]:
    """`[minute, task, key]` of every run a scheduler process with `TZ=host_tz` starts
    over [start, end) on a fresh SQLite database."""
    url, _ = new_database("sqlite", tmp_path)
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    env = cli_env(url, CRONJOBS_TIMEZONE=tz, TZ=host_tz,
                  CRONJOBS_HANDLER_PATHS=os.pathsep.join(HANDLER_PATHS))
    done = subprocess.run([sys.executable, str(PROCS / "tick_window.py"), start.isoformat(),
                           end.isoformat()], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def ticked_here() -> dict[str, list[list[str]]]:
    """Night -> `[minute, task, key]` of every run the test process started over it (with
    its own TZ), driven once and compared with each host TZ's scheduler process."""
    return {}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("night, host_tz", [("berlin-fall", "Asia/Tokyo"),
                                            ("berlin-fall", "America/Los_Angeles"),
                                            ("newyork-fall", "Europe/Berlin"),
                                            ("newyork-fall", "Australia/Lord_Howe")])
def test_the_host_time_zone_changes_no_row(make_app, tmp_path, night, host_tz, ticked_here):
    tz, start, end = NIGHTS[night]
    if night not in ticked_here:  # this process's runs of the night, the same for each host_tz
        clock = FrozenClock(start)
        app = make_app(clock=clock, timezone=tz, handler_paths=HANDLER_PATHS)
        ticked_here[night] = [[r.now.replace(second=0).isoformat(), task, key]
                              for r in drive(app, clock, start, end) for task, key, _ in r.started]
    here = ticked_here[night]
    there = tick_in_a_subprocess(tmp_path, tz, host_tz, start, end)
    assert len(here) > 300 and there == here
