"""The built-in health task alerts a local HTTP server (webhook and Telegram Bot API) and a
local SMTP server (aiosmtpd) exactly once for a problem that lasts three health runs (at
its second), and once after it has passed two runs; a reminder an hour after the alert; a
failed delivery is tried again at the next run."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from aiosmtpd.controller import Controller

from alert_helpers import Inbox, free_port
from cronjobs.app import App
from cronjobs.health import alerts, run_health
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_alert, cronjob_queue, cronjob_worker
from cronjobs.testing import FrozenClock, drain
from dashboard_helpers import add_row, db_now, recent_t0


class Mailbox:
    """aiosmtpd handler keeping every message."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], str]] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.rcpt_tos, envelope.content.decode()))
        return "250 OK"


@pytest.fixture
def channels():
    inbox, box = Inbox(), Mailbox()
    smtp = Controller(box, hostname="127.0.0.1", port=free_port())
    smtp.start()
    yield inbox, box, smtp.port
    smtp.stop()
    inbox.close()


def alert_settings(inbox: Inbox, smtp_port: int) -> dict:
    return {"alert_webhook_url": inbox.url + "/hook", "alert_telegram_bot_token": "123:abc",
            "alert_telegram_chat_id": "42", "alert_telegram_api_url": inbox.url,
            "alert_smtp_host": "127.0.0.1", "alert_smtp_port": smtp_port,
            "alert_smtp_to": ("ops@example.test",)}


def health_run(app, clock, minutes: int) -> dict:
    """Scheduler ticks every minute up to T0 + minutes (a */5 slot), with a fresh heartbeat
    and a drain after each; returns the result of that slot's health run."""
    done = getattr(app, "_minutes_ticked", -1)
    for minute in range(done + 1, minutes + 1):
        clock.set(app.t0.replace(second=0) + timedelta(minutes=minute, seconds=1))
        seen = db_now(app)  # heartbeat ages follow the database's clock
        with app.engine.begin() as conn:
            conn.execute(cronjob_worker.delete())
            conn.execute(cronjob_worker.insert().values(
                id="w1", host="h", pid=1, queues="default,maintenance", status="running",
                started_at=seen, last_seen_at=seen, jobs_done=0))
        report = tick(clock.now(), app=app)
        drain(app)
    app._minutes_ticked = minutes
    [health_job] = [j for t, _, j in report.started if t == "cronjobs-health"]
    with app.engine.connect() as conn:
        result = conn.execute(sa.select(cronjob_queue.c.result_payload, cronjob_queue.c.status)
                              .where(cronjob_queue.c.id == health_job)).one()
    assert result.status == "completed"
    return json.loads(result.result_payload)


def test_one_alert_for_a_problem_lasting_three_runs_and_one_recovery(make_app, channels):
    inbox, mailbox, smtp_port = channels
    T0 = recent_t0()
    clock = FrozenClock(T0)
    app = make_app(clock=clock, **alert_settings(inbox, smtp_port))
    app.t0 = T0
    first = health_run(app, clock, 0)
    assert first["status"] == "ok", first["problems"]
    assert inbox.posts == [] and mailbox.messages == []

    orphan = add_row(app, queue="orphaned")  # due work that no worker consumes
    results = [health_run(app, clock, m) for m in (5, 10, 15)]
    assert [r["status"] for r in results] == ["fail"] * 3
    assert [r["alerted"] for r in results] == [0, 1, 0]
    assert [p["key"] for p in results[0]["problems"]] == ["workers:orphaned"]

    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.delete().where(cronjob_queue.c.id == orphan))
    passing = [health_run(app, clock, m) for m in (20, 25, 30)]
    assert [r["status"] for r in passing] == ["ok"] * 3
    assert [r["alerted"] for r in passing] == [0, 1, 0]

    hooks = [body for path, body in inbox.posts if path == "/hook"]
    telegram = [body for path, body in inbox.posts if path == "/bot123:abc/sendMessage"]
    assert len(inbox.posts) == 4 and len(hooks) == 2 and len(telegram) == 2
    assert hooks[0]["event"] == "problem" and hooks[0]["recovered"] == []
    assert [p["key"] for p in hooks[0]["problems"]] == ["workers:orphaned"]
    assert "queue 'orphaned' has 1 due row(s) and no live worker" in hooks[0]["text"]
    assert hooks[1]["event"] == "recovered" and hooks[1]["problems"] == []
    assert [p["key"] for p in hooks[1]["recovered"]] == ["workers:orphaned"]
    assert telegram[0]["chat_id"] == "42" and "FAIL: queue 'orphaned'" in telegram[0]["text"]
    assert "RECOVERED" in telegram[1]["text"]
    assert len(mailbox.messages) == 2
    (to1, mail1), (to2, mail2) = mailbox.messages
    assert to1 == to2 == ["ops@example.test"]
    assert "FAIL: 1 problem(s)" in mail1 and "orphaned" in mail1
    assert "recovered: 1 problem(s)" in mail2
    assert "was failing since" in telegram[1]["text"] and "for 15 min)" in telegram[1]["text"]
    with app.engine.connect() as conn:  # watched for flapping a while longer, not alerted
        rows = conn.execute(sa.select(cronjob_alert)).mappings().all()
    assert [(r["problem"], r["state"], r["alerted_at"]) for r in rows] == \
        [("workers:orphaned", "pass", None)]


def test_a_problem_still_open_after_an_hour_is_alerted_again(make_app, channels):
    inbox, _, smtp_port = channels
    T0 = recent_t0()
    clock = FrozenClock(T0)
    app = make_app(clock=clock, **alert_settings(inbox, smtp_port))
    sent = []
    for minutes in (0, 5, 30, 64, 65, 100, 125):
        clock.set(T0 + timedelta(minutes=minutes))
        sent.append(alerts.process(app, run_health(app)).problems != [])
    # problems seen at 0, alerted at their second run (5); reminders at 65 and 125
    assert sent == [False, True, False, False, True, False, True]


def test_when_every_channel_fails_the_next_run_tries_again(make_app, channels):
    inbox, _, _ = channels
    T0 = recent_t0()
    clock = FrozenClock(T0)
    app = make_app(clock=clock, alert_webhook_url=f"http://127.0.0.1:{free_port()}/down",
                   alert_timeout_seconds=2, alert_after_runs=1)
    first = alerts.process(app, run_health(app))
    assert first.problems and first.delivered == [] and "webhook" in first.failed
    clock.set(T0 + timedelta(minutes=5))
    # The operator fixes the URL and restarts: the same database, the new settings.
    fixed = app.settings.alerts.model_copy(update={"webhook_url": inbox.url + "/hook"})
    app = App(app.settings.model_copy(update={"alerts": fixed}), clock=clock,
              engine=app.engine, handlers=app.handlers)
    second = alerts.process(app, run_health(app))
    assert second.delivered == ["webhook"]
    assert {p["key"] for p in second.problems} == {p["key"] for p in first.problems}
    assert len(inbox.posts) == 1
