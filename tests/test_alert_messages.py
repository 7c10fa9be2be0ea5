"""What a real webhook receives as a problem fails and passes over health runs on a frozen
clock: nothing for a one-run blip, one alert after two failing runs, one recovery after two
passing runs (retried after HTTP 500 until delivered), one "flapping" notice and hourly
reminders at most for a problem down 40 s / up 40 s, since/for in every text, and one
message when two alert loops run at once; on SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from alert_helpers import Inbox, report
from cronjobs.app import App
from cronjobs.health import alerts
from cronjobs.store.models import cronjob_alert
from cronjobs.testing import FrozenClock

T0 = datetime(2026, 3, 1, 14, 3)
DISK = ("resources", "disk", "fail", "disk 95 % used")
FIVE_MINUTES = timedelta(minutes=5)


@pytest.fixture
def inbox():
    box = Inbox()
    yield box
    box.close()


@pytest.fixture
def alerting(make_app, inbox):
    """`(app, clock, run)`: `run(failing, at)` is one alert pass over a report at `at` with
    the disk problem failing or not."""
    clock = FrozenClock(T0)
    app = make_app(clock=clock, alert_webhook_url=inbox.url + "/hook", alert_timeout_seconds=5)

    def run(failing: bool, at: datetime) -> alerts.AlertRun:
        clock.set(at)
        return alerts.process(app, report(at, *([DISK] if failing else [])))

    return app, clock, run


def drive(run, pattern: str, start: datetime = T0, every: timedelta = FIVE_MINUTES) -> datetime:
    """One pass per character (`F` failing, `P` passing), `every` apart; returns the next time."""
    for i, seen in enumerate(pattern):
        run(seen == "F", start + i * every)
    return start + len(pattern) * every


def alert_rows(app) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(cronjob_alert)).mappings()]


def test_a_one_run_blip_sends_nothing(alerting, inbox):
    app, _, run = alerting
    after = drive(run, "FPPP")
    assert inbox.attempts == []
    run(False, after + timedelta(minutes=60))  # its row is dropped once its change is old
    assert alert_rows(app) == []


def test_two_failing_runs_alert_once(alerting, inbox):
    _, _, run = alerting
    drive(run, "FFFFF")
    [hook] = inbox.hooks()
    assert hook["event"] == "problem" and hook["status"] == "fail"
    [problem] = hook["problems"]
    assert (problem["key"], problem["kind"]) == ("disk", "problem")
    assert problem["line"] == "FAIL: disk 95 % used (failing since 14:03 UTC, for 5 min)"
    assert problem["since"] == "2026-03-01T14:03:00Z" and problem["duration_seconds"] == 300
    assert hook["at"] == "2026-03-01T14:08:00Z"


def test_recovery_after_two_passing_runs_says_since_when_and_how_long(alerting, inbox):
    _, _, run = alerting
    after = drive(run, "FFFFFF")  # failing 14:03 to 14:28
    assert len(inbox.hooks()) == 1
    run(False, after)
    assert len(inbox.hooks()) == 1  # one passing run is not a recovery
    run(False, after + FIVE_MINUTES)
    problem, recovery = inbox.hooks()
    assert recovery["event"] == "recovered" and recovery["problems"] == []
    [entry] = recovery["recovered"]
    assert entry["line"] == "RECOVERED: disk 95 % used (was failing since 14:03 UTC, for 30 min)"
    assert entry["duration_seconds"] == 30 * 60
    assert "was failing since 14:03 UTC, for 30 min" in recovery["text"]
    drive(run, "PPPP", after + 2 * FIVE_MINUTES)
    assert len(inbox.hooks()) == 2


def test_a_recovery_refused_with_http_500_is_sent_again_until_delivered(alerting, inbox):
    app, _, run = alerting
    after = drive(run, "FFF")
    inbox.answers = [500, 500]
    runs = [run(False, after + i * FIVE_MINUTES) for i in range(6)]
    assert [r.recovered != [] for r in runs] == [False, True, True, True, False, False]
    assert [r.delivered for r in runs[1:4]] == [[], [], ["webhook"]]
    assert "HTTP Error 500" in runs[1].failed["webhook"]
    codes = [(body["event"], code) for _, body, code in inbox.attempts]
    assert codes == [("problem", 200), ("recovered", 500), ("recovered", 500), ("recovered", 200)]
    [row] = alert_rows(app)  # kept for flap detection, no longer alerted
    assert (row["state"], row["alerted_at"], row["sending_until"]) == ("pass", None, None)


def test_a_problem_refused_with_http_500_is_sent_again_at_the_next_run(alerting, inbox):
    _, _, run = alerting
    inbox.answers = [500]
    drive(run, "FFFF")
    assert [(b["event"], code) for _, b, code in inbox.attempts] == [("problem", 500),
                                                                      ("problem", 200)]
    assert inbox.hooks()[0]["problems"][0]["line"].endswith("(failing since 14:03 UTC, for 10 min)")


def test_flapping_40s_down_40s_up_for_30_minutes_sends_one_flapping_notice(alerting, inbox):
    _, _, run = alerting
    # health runs every 5 minutes: the states seen are down, up, up, down, down, up, up, ...
    for i in range(7):
        at = T0 + i * FIVE_MINUTES
        run((at - T0).total_seconds() % 80 < 40, at)
    [hook] = inbox.hooks()
    [problem] = hook["problems"]
    assert problem["kind"] == "flapping"
    assert problem["line"] == ("FLAPPING (FAIL): disk 95 % used (failing on and off since "
                               "14:03 UTC, for 15 min: 3 state changes in 60 min)")


def test_flapping_for_three_hours_is_reminded_at_most_hourly(alerting, inbox):
    _, _, run = alerting
    every = timedelta(seconds=40)  # a run each 40 s: down, up, down, up, ...
    drive(run, "FP" * (3 * 3600 // 80), every=every)
    hooks = inbox.hooks()
    kinds = [h["problems"][0]["kind"] for h in hooks]
    assert kinds == ["flapping", "reminder", "reminder"]
    sent = [datetime.fromisoformat(h["at"].rstrip("Z")) for h in hooks]
    assert all(b - a >= timedelta(hours=1) for a, b in zip(sent, sent[1:], strict=False))
    assert hooks[1]["problems"][0]["line"].startswith(
        "STILL FLAPPING (FAIL): disk 95 % used (failing on and off since 14:03 UTC, for 1 h 1 min")


def test_a_reminder_says_since_when(alerting, inbox):
    _, _, run = alerting
    drive(run, "F" * 14)  # 14:03 to 15:08
    first, reminder = inbox.hooks()
    assert reminder["at"] == "2026-03-01T15:08:00Z"
    assert reminder["problems"][0]["line"] == \
        "STILL FAIL: disk 95 % used (failing since 14:03 UTC, for 1 h 5 min)"


def test_problems_of_a_check_that_did_not_answer_neither_fail_nor_pass(alerting, inbox):
    app, clock, run = alerting
    orphaned = ("workers", "workers:emails", "fail", "queue 'emails' has 3 due row(s)")
    broke = ("workers", "workers", "fail", "workers: no answer within 3 s")
    for i, problems in enumerate([[orphaned], [orphaned], [broke], [broke], [orphaned]]):
        clock.set(T0 + i * FIVE_MINUTES)
        alerts.process(app, report(clock.now(), *problems))
    keys = [[p["key"] for p in h["problems"] + h["recovered"]] for h in inbox.hooks()]
    # no recovery of workers:emails while its check did not answer; the check's own problem alerts
    assert keys == [["workers:emails"], ["workers"]]
    assert {r["problem"]: r["runs"] for r in alert_rows(app)}["workers:emails"] == 3


def test_two_alert_loops_at_once_send_one_message(alerting, inbox):
    configured, _, _ = alerting
    at_once = configured.settings.alerts.model_copy(update={"after_runs": 1})
    app = App(configured.settings.model_copy(update={"alerts": at_once}),
              clock=configured.clock, engine=configured.engine, handlers=configured.handlers)
    barrier = threading.Barrier(2)
    done = []

    def loop() -> None:
        barrier.wait(10)
        done.append(alerts.process(app, report(T0, DISK,
                                               ("workers", "workers:emails", "warn", "x"))))

    threads = [threading.Thread(target=loop) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(done) == 2 and len(inbox.attempts) == 1
    assert sorted(p["key"] for p in inbox.hooks()[0]["problems"]) == ["disk", "workers:emails"]
    assert all(r["alerted_at"] == T0 for r in alert_rows(app))


def test_a_message_being_sent_is_not_sent_by_another_loop(alerting, inbox):
    app, _, run = alerting
    run(True, T0)
    inbox.hold = True
    first = threading.Thread(target=run, args=(True, T0 + FIVE_MINUTES))
    first.start()
    assert inbox.arrived.wait(10)  # the first loop is sending, its decision committed
    inbox.hold = False
    other = alerts.process(app, report(T0 + FIVE_MINUTES, DISK))
    inbox.release.set()
    first.join(30)
    assert other.problems == [] and len(inbox.attempts) == 1
    [row] = alert_rows(app)
    assert row["alerted_at"] == T0 + FIVE_MINUTES and row["sending_until"] is None
