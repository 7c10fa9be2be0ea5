"""One bad handler never stops every scheduled task: a handler the worker refuses stops
`cronjobs scheduler` at start (exit 2, the worker's line), and a task whose slot row cannot
be made (its `limit_key` raises on `{"slot": ...}`) fails that slot alone: recorded as a
skip for `error`, logged once, failed by health and alerted, while every other task's slot
starts in the same tick. Real `cronjobs` processes on MariaDB (the scheduler also on
PostgreSQL); the tick on every backend."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from alert_helpers import Inbox
from conftest import SAMPLE_HANDLERS, cli_env, run_cli
from cronjobs import CronJobHandler
from cronjobs.clock import FrozenClock
from cronjobs.health import alerts, run_health
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue, cronjob_runtime
from dashboard_helpers import recent_t0
from test_worker_e2e import wait_for

MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

BAD_HANDLER = """from cronjobs import CronJobHandler


class BadExecute(CronJobHandler):
    TYPE = "bad.thing.execute"
    {constant}

    def handle(self, payload, job):
        return True
"""

# A scheduled handler whose limit key is a payload field a slot's payload never has.
KEYLESS_SLOT = """from cronjobs import CronJobHandler


class KeylessDiscover(CronJobHandler):
    TYPE = "test.keyless.discover"
    FREQUENCY = "minute"

    def limit_key(self, payload):
        return payload["chat_id"]

    def handle(self, payload, job):
        return True
"""
KEY_ERROR = "limit key of KeylessDiscover: limit_key(payload) raised KeyError: 'chat_id'"


def handler_env(db_url: str, folder: Path, **extra: str) -> dict:
    return cli_env(db_url, CRONJOBS_HANDLER_PATHS=f"{SAMPLE_HANDLERS}{os.pathsep}{folder}",
                   **extra)


@MARIADB
@pytest.mark.parametrize("constant,message", [
    ("CONCURRENCY = 0", "BadExecute: CONCURRENCY must be an integer >= 1"),
    ('RATE_LIMIT = "abc"', "BadExecute: RATE_LIMIT must look like '30/s'"),
    ('OVERLAP = "never"', "BadExecute: OVERLAP must be one of"),
])
def test_a_scheduler_with_a_handler_the_worker_refuses_exits_2_at_start(
        db_url, tmp_path, constant, message):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "BadExecute.py").write_text(BAD_HANDLER.format(constant=constant))
    env = handler_env(db_url, folder, CRONJOBS_LOG_LEVEL="INFO")
    answers = {args[0]: run_cli(args, env, cwd=tmp_path)
               for args in (["scheduler"], ["tick"], ["worker", "--burst"])}
    lines = {}
    for command, out in answers.items():
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        assert out.stdout == "" and out.stderr.count("\n") == 1, (command, out.stderr)
        lines[command] = out.stderr
    assert lines["scheduler"] == lines["tick"] == lines["worker"]
    assert lines["scheduler"].startswith(f"error: {message}"), lines
    with sa.create_engine(db_url, poolclass=sa.pool.NullPool).connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)).scalar() == 0


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_a_tick_with_one_task_whose_limit_key_raises_starts_every_other_slot(
        db_url, tmp_path):
    """`cronjobs scheduler` as a real process: its first tick starts every other task
    (recover-stale included), records the bad task's slot as skipped for `error`, logs it
    once; SIGTERM says what the scheduler stops; health fails naming the error;
    `cronjobs tasks run` of the task is refused with its line."""
    folder = tmp_path / "keyless"
    folder.mkdir()
    (folder / "KeylessDiscover.py").write_text(KEYLESS_SLOT)
    env = handler_env(db_url, folder, CRONJOBS_LOG_LEVEL="INFO")
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    expected = {"cronjobs.recoverstale.execute", "cronjobs.cleanup.execute",
                "test.count.discover"}  # not the uptime task: idle without a URL
    log = tmp_path / "scheduler.log"

    def first_tick_done() -> dict | None:
        with engine.connect() as conn:
            types = {r[0] for r in conn.execute(sa.select(cronjob_queue.c.type))}
            rt = conn.execute(sa.select(cronjob_runtime).where(
                cronjob_runtime.c.task == "test-keyless")).mappings().first()
        return dict(rt) if expected <= types and rt and rt["last_skip_reason"] else None

    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "scheduler"], env=env,
                                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
        try:
            runtime = wait_for(first_tick_done, 60, "the first tick", proc, log)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    text = log.read_text()
    assert code == 0, text
    runtime = first_tick_done()  # again: a minute may have begun before the SIGTERM
    assert runtime["last_skip_reason"] == "error" and runtime["last_job_id"] is None
    assert runtime["skipped_count"] >= 1
    errors = [line for line in text.splitlines() if " ERROR " in line]
    slots = [line.split(" slot ")[1].split()[0] for line in errors]
    assert errors and all("task test-keyless slot" in line and KEY_ERROR in line
                          for line in errors), text
    assert len(slots) == len(set(slots)) == runtime["skipped_count"], text  # once per slot
    assert "Traceback" not in text and "tick failed" not in text
    assert "received SIGTERM: scheduler: stopping; no new ticks" in text
    assert "no new jobs" not in text
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue).where(
            cronjob_queue.c.type == "test.keyless.discover")).scalar() == 0

    health = run_cli(["health"], env, cwd=tmp_path)
    assert f"FAIL: task test-keyless: slot {runtime['last_skipped_slot']} started nothing: " \
           f"its job row could not be made ({KEY_ERROR})" in health.stdout, health.stdout
    refused = run_cli(["tasks", "run", "test-keyless"], env, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr == f"error: {KEY_ERROR}\n"
    engine.dispose()


class KeylessDiscover(CronJobHandler):
    TYPE = "test.keyless.discover"
    FREQUENCY = "minute"

    def limit_key(self, payload):
        return payload["chat_id"]

    def handle(self, payload, job):
        return True


def test_tick_records_the_failed_slot_once_and_starts_the_others(make_app, caplog):
    clock = FrozenClock(recent_t0())
    app = make_app(clock=clock)
    app.handlers.register(KeylessDiscover.TYPE, KeylessDiscover)
    caplog.set_level(logging.INFO, "cronjobs.schedule.scheduler")
    first = tick(app=app)
    again = tick(app=app)  # the same slot: nothing recorded or logged again
    clock.advance(60)
    later = tick(app=app)
    started = {task for task, _, _ in first.started}
    assert {"cronjobs-recoverstale", "cronjobs-cleanup", "test-count"} <= started
    assert first.skipped["http-uptime"] == "idle"  # no uptime URL: nothing to do
    assert "test-keyless" not in started
    assert (first.skipped["test-keyless"], first.errors) == ("error", {"test-keyless": KEY_ERROR})
    assert (again.skipped["test-keyless"], again.errors) == ("skipped", {})
    assert later.errors == {"test-keyless": KEY_ERROR}
    assert {task for task, _, _ in later.started} >= {"cronjobs-recoverstale", "test-count"}
    with app.engine.connect() as conn:
        rt = conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == "test-keyless")).mappings().one()
    assert (rt["skipped_count"], rt["last_skip_reason"]) == (2, "error")
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().split(" skipped")[0] for r in logged] == [
        f"task test-keyless slot {first.now:%Y%m%d%H%M}",
        f"task test-keyless slot {later.now:%Y%m%d%H%M}"]


@SQLITE
def test_a_failed_slot_fails_health_and_is_alerted_until_a_slot_starts(make_app):
    inbox = Inbox()
    try:
        clock = FrozenClock(recent_t0())
        app = make_app(clock=clock, alert_webhook_url=inbox.url + "/hook")
        app.handlers.register(KeylessDiscover.TYPE, KeylessDiscover)
        tick(app=app)
        runs = []
        for _ in range(2):  # alerted at the second failing run
            report = run_health(app)
            runs.append(alerts.process(app, report))
            clock.advance(30)
        check = next(c for c in report.checks if c.name == "scheduler")
        assert check.status == "fail" and check.data["failed_slots"] == {
            "test-keyless": f"{(clock.now() - timedelta(seconds=60)):%Y%m%d%H%M}"}
        assert "1 task(s) whose last slot failed" in check.message
        alerted = [{p["key"] for p in r.problems} for r in runs]
        assert "slot-error:test-keyless" in alerted[1] - alerted[0], alerted
        [(path, body)] = inbox.posts
        assert path == "/hook" and KEY_ERROR in body["text"]

        app.handlers.unregister(KeylessDiscover.TYPE)  # fixed: its next slot starts
        fixed = type("KeylessDiscover", (KeylessDiscover,), {"limit_key": lambda s, p: None})
        app.handlers.register(fixed.TYPE, fixed)
        clock.advance(60)
        assert "test-keyless" in {task for task, _, _ in tick(app=app).started}
        check = next(c for c in run_health(app).checks if c.name == "scheduler")
        assert check.data["failed_slots"] == {} and not check.problems
    finally:
        inbox.close()


@SQLITE
def test_cli_tick_names_the_failed_slot_and_exits_1(db_url, tmp_path):
    folder = tmp_path / "keyless"
    folder.mkdir()
    (folder / "KeylessDiscover.py").write_text(KEYLESS_SLOT)
    out = run_cli(["tick"], handler_env(db_url, folder), cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert f"skipped test-keyless: error ({KEY_ERROR})" in out.stdout.splitlines()
    assert "started cronjobs-recoverstale slot" in out.stdout


@SQLITE
def test_a_task_whose_frequency_gives_no_slot_fails_alone(make_app, caplog):
    """A frequency written into the runtime row by hand that is no cron line: that task
    has no slot to record; its error is reported and logged once, the others start."""
    app = make_app(clock=FrozenClock(recent_t0()))
    tick(app=app)
    with app.engine.begin() as conn:
        conn.execute(cronjob_runtime.update().where(cronjob_runtime.c.task == "test-count")
                     .values(frequency="every minute"))
    caplog.set_level(logging.ERROR, "cronjobs.schedule.scheduler")
    caplog.clear()  # the first tick's INFO lines, kept when an earlier test set INFO
    app.clock.advance(60)
    reports = [tick(app=app), tick(app=app)]
    for report in reports:
        assert report.skipped["test-count"] == "error"
        assert report.errors["test-count"].startswith("CronSimError: ")
    assert "cronjobs-recoverstale" in {task for task, _, _ in reports[0].started}
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "task test-count"]  # once for this process
