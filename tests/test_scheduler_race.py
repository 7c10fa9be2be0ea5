"""3 scheduler processes tick the same 10 simulated minutes for a
minute task whose handler returns `cancelled` (so its row is deleted) -> the handler ran
exactly 10 times. The slot is claimed by the database, not proven by the job row."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import cli_env, effect_rows
from cronjobs.clock import FrozenClock
from cronjobs.store.models import cronjob_queue, cronjob_runtime, cronjob_slot
from cronjobs.testing import drain

PROCS = Path(__file__).parent / "procs"
T0 = datetime(2026, 1, 5, 12, 0, 7)
MINUTES = [T0 + timedelta(minutes=i) for i in range(10)]
SLOTS = [f"2026010512{i:02d}" for i in range(10)]
SCHEDULERS = 3
RACE_BACKENDS = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)


def assert_ran_once_per_slot(app) -> None:
    count = effect_rows(app, "count")
    assert len(count) == 10, [r["info"] for r in count]
    assert sorted(r["info"] for r in count) == SLOTS
    with app.engine.connect() as conn:
        left = conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)
                            .where(cronjob_queue.c.type == "test.count.discover")).scalar_one()
        slots = conn.execute(sa.select(cronjob_slot.c.slot)
                             .where(cronjob_slot.c.task == "test-count")).scalars().all()
    assert left == 0, "cancelled childless rows are deleted"
    assert sorted(slots) == SLOTS


def tick_all(procs, now: datetime) -> list[dict]:
    """Give `now` to every scheduler back to back, then collect their reports."""
    for proc in procs:
        proc.stdin.write(now.isoformat() + "\n")
        proc.stdin.flush()
    return [json.loads(proc.stdout.readline()) for proc in procs]


def run_lockstep(env: dict, between) -> tuple[list[list[dict]], list[list[dict]]]:
    """Start the schedulers and wait until all are ready. Then for each minute: all tick it
    at once; `between()` runs the jobs (the cancelled rows are deleted); all tick the same
    minute again, 30 s later. Returns the reports of both rounds, per minute."""
    procs = [subprocess.Popen([sys.executable, str(PROCS / "tick_minutes.py")], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for _ in range(SCHEDULERS)]
    first, again = [], []
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        for now in MINUTES:
            first.append(tick_all(procs, now))
            between()
            again.append(tick_all(procs, now + timedelta(seconds=30)))
        for proc in procs:
            proc.stdin.close()  # end of input: the scheduler exits
        for proc in procs:
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                pipe.close()
    return first, again


UPTIME_URL = {"CRONJOBS_UPTIME_URLS": "http://127.0.0.1:9/"}


def started_of(report: dict, task: str = "test-count") -> list[str]:
    return [slot for t, slot, _ in report["started"] if t == task]


@RACE_BACKENDS
def test_three_schedulers_ten_minutes_handler_runs_ten_times(db_url, make_app):
    app = make_app(clock=FrozenClock(MINUTES[-1] + timedelta(seconds=45)))
    ran = []
    # an uptime URL (never fetched: drain's App has none, so its discover finds no target)
    # gives the built-in uptime task work, so it races too (without one it is idle)
    first, again = run_lockstep({**cli_env(db_url), **UPTIME_URL},
                                lambda: ran.append(len(drain(app))))

    winners, reasons = [], []
    for now, per_process in zip(MINUTES, first, strict=True):
        started = [slot for r in per_process for slot in started_of(r)]
        assert len(started) == 1, (now, per_process)
        winners.append(started[0])
        losers = [r["skipped"].get("test-count") for r in per_process if not started_of(r)]
        assert len(losers) == SCHEDULERS - 1
        assert set(losers) <= {"already-run", "lost-race"}, losers
        reasons += losers
    assert winners == SLOTS
    # The processes really overlapped: losers reached the slot claim while the winner's
    # transaction was open (in practice every loser of every minute does).
    assert "lost-race" in reasons
    # The second round came after the row was run and deleted: nothing started again.
    assert [r["started"] for minute in again for r in minute] == [[]] * (10 * SCHEDULERS)
    assert all(n >= 1 for n in ran)

    len(drain(app))
    assert_ran_once_per_slot(app)
    # every other minute task was started once per slot too (no duplicates anywhere)
    per_task = Counter(task for minute in first + again for r in minute
                       for task, _, _ in r["started"])
    assert per_task == {"test-count": 10, "cronjobs-recoverstale": 10, "http-uptime": 10,
                        "cronjobs-cleanup": 1, "cronjobs-health": 2, "tls-certexpiry": 1}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_three_cli_tick_loops_run_the_handler_ten_times(db_url, make_app):
    """The same race through the real command line: 3 loops of `cronjobs tick --now`,
    started together and running freely (no pauses)."""
    env = cli_env(db_url)
    env["CRONJOBS_LOG_LEVEL"] = "INFO"
    env.update(UPTIME_URL)  # the uptime task has work (its skips are counted below)
    times = " ".join(now.isoformat() for now in MINUTES)
    loop = (f'for t in {times}; do "{sys.executable}" -m cronjobs tick --now "$t" || exit 1; '
            f"done")
    procs = [subprocess.Popen(["sh", "-c", loop], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(SCHEDULERS)]
    outs, logs = [], []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        outs.append(out)
        logs += err.splitlines()

    started = sorted(line.split()[3] for out in outs for line in out.splitlines()
                     if line.startswith("started test-count "))
    assert started == SLOTS
    # At INFO, only winners speak: a scheduler that lost a slot logs nothing above DEBUG.
    # No worker runs, so the uptime check of one minute is still pending at the next:
    # that slot is skipped (OVERLAP skip), said once by the scheduler that recorded it.
    skips = [line.split(" slot ")[0].split()[-1] + " " + line.split(" slot ")[1].split()[0]
             for line in logs if " skipped (running)" in line]
    assert skips and len(skips) == len(set(skips)), [x for x in logs if "skipped" in x]
    assert [line for line in logs
            if "started as job" not in line and " skipped (running)" not in line] == []
    assert sum(" task test-count slot " in line for line in logs) == 10
    app = make_app(clock=FrozenClock(MINUTES[-1] + timedelta(seconds=30)))
    with app.engine.connect() as conn:  # and counted once each, by whoever recorded it
        counted = dict(conn.execute(sa.select(cronjob_runtime.c.task,
                                              cronjob_runtime.c.skipped_count)).all())
    assert counted["http-uptime"] == sum(s.startswith("http-uptime ") for s in skips)
    len(drain(app))
    assert_ran_once_per_slot(app)
