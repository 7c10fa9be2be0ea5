"""The page of one task (`/tasks/NAME`): settings, next fire times in the scheduler's zone,
the last 50 runs with outcome, duration and children, success rate and a duration chart;
Run now with an optional JSON payload, validated (a 400 naming the reason, nothing
dispatched), merged with the manual-run marker."""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timedelta

import pytest

from cronjobs import limits
from cronjobs.clock import FrozenClock
from cronjobs.errors import InvalidJob
from cronjobs.schedule.manual import run_now
from cronjobs.schedule.tasks import task_infos
from dashboard_helpers import BEARER, TOKEN, add_row, count, login, row, web_client

T0 = datetime(2026, 1, 5, 12, 30, 5)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def app(make_app):
    return make_app(clock=FrozenClock(T0), dashboard_token=TOKEN, timezone="Europe/Istanbul",
                    tasks={"test-count": {"frequency": "30 9 * * *"}})


def page(client, path: str, code: int = 200) -> str:
    resp = client.get(path, headers=BEARER)
    assert resp.status_code == code, (path, resp.get_data(as_text=True)[:800])
    return resp.get_data(as_text=True)


def run_of(app, status: str, seconds: float, minutes_ago: int, **values) -> int:
    start = T0 - timedelta(minutes=minutes_ago)
    end = start + timedelta(seconds=seconds) if status in ("completed", "failed") else None
    return add_row(app, type="test.count.discover", status=status, started_at=start,
                   finished_at=end, attempts=1, **values)


def test_history_success_rate_durations_and_children(app):
    for i in range(52):  # the oldest two are beyond the last 50
        run_of(app, "completed", 1.0 + i % 3, 200 - i)
    failed = run_of(app, "failed", 4.5, 60, error="HTTP 503 from <upstream>")
    parent = run_of(app, "completed", 0.25, 30)
    for status in ("completed", "completed", "pending"):
        add_row(app, type="test.count.execute", status=status, parent_id=parent)
    running = run_of(app, "running", 0, 1)
    text = page(web_client(app), "/tasks/test-count")
    runs = text.split('id="runs"', 1)[1].split("</table>", 1)[0]
    ids = [int(i) for i in re.findall(r"<tr data-id=\"(\d+)\"", runs)]
    assert len(ids) == 50 and ids[:3] == [running, parent, failed] and ids == sorted(ids)[::-1]
    assert "HTTP 503 from &lt;upstream&gt;" in runs and "4.500 s" in runs
    assert "1 min so far" in runs  # the running one: its elapsed time
    kids = runs.split(f'data-id="{parent}"', 1)[1].split("</tr>", 1)[0]
    assert f"/queue?parent={parent}&amp;status=completed" in kids and "st-pending" in kids
    # the newest 47 of the 52, the failed one and the parent ended: 48 of 49 completed
    assert "Success rate: 98% of 49 finished runs." in text
    assert 'id="chart-durations"' in text and text.count('class="seg-failed"') == 1
    assert f"<title>#{failed} failed, 4.500 s</title>" in text


def test_settings_and_next_fire_times_in_the_schedulers_zone(app):
    text = page(web_client(app), "/tasks/test-count")
    settings = text.split('id="settings"', 1)[1].split("</table>", 1)[0]
    assert "<code>test.count.discover</code>" in settings and "30 9 * * *" in settings
    assert "override" in settings and "Europe/Istanbul" in settings
    fires = text.split('id="fires"', 1)[1].split("</ol>", 1)[0]
    # 09:30 in Istanbul (UTC+3) is 06:30 UTC; at 12:30 UTC the next one is tomorrow's
    assert fires.count("<li>") == 5
    assert ('<time datetime="2026-01-06T06:30:00Z" title="2026-01-06 06:30:00 UTC">'
            "2026-01-06 09:30 +03") in fires
    assert "2026-01-10 09:30 +03" in fires
    health = page(web_client(app), "/tasks/cronjobs-recoverstale")  # named: UTC minutes
    assert "every minute" in health
    assert "2026-01-05 12:31 UTC" in health.split('id="fires"', 1)[1]
    assert "gün" in page(web_client(app), "/tasks/cronjobs-cleanup?lang=tr")  # every day
    page(web_client(app), "/tasks/no-such-task", 404)


@SQLITE
def test_run_now_with_a_payload_keeps_the_manual_marker(app):
    client = web_client(app)
    csrf = login(client)
    task_infos(app)
    resp = client.post("/tasks/test-count/run", data={
        "csrf_token": csrf, "request_token": "tok-payload-1", "back": "task",
        "payload": '{"name": "Ada", "manual": false, "n": 12345678901234567890}'})
    assert resp.status_code == 303
    job = row(app, int(resp.headers["Location"].rsplit("/", 1)[1]))
    assert json.loads(job["payload"]) == {"name": "Ada", "manual": True,
                                          "n": 12345678901234567890}
    assert job["priority"] == 1 and job["type"] == "test.count.discover"
    empty = client.post("/tasks/test-count/run", data={
        "csrf_token": csrf, "request_token": "tok-payload-2", "payload": "  "})
    assert json.loads(row(app, int(empty.headers["Location"].rsplit("/", 1)[1]))["payload"]) \
        == {"manual": True}


@SQLITE
@pytest.mark.parametrize("payload, reason", [
    ("not json", "payload is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    ("[1, 2]", 'payload must be a JSON object ({"key": "value"}), got list'),
    ('"text"', 'payload must be a JSON object ({"key": "value"}), got str'),
    ('{"a": ' * 101 + "1" + "}" * 101, "payload is nested more than 100 levels deep"),
    ("[" * 5000 + "]" * 5000, "payload is nested more than 100 levels deep"),
    ('{"a": "' + "x" * limits.PAYLOAD_MAX_BYTES + '"}',
     "payload is 1,000,009 bytes of JSON; the limit is 1,000,000 bytes"),
])
def test_a_bad_payload_is_a_400_with_the_reason_and_nothing_is_dispatched(app, payload, reason):
    client = web_client(app)
    csrf = login(client)
    resp = client.post("/tasks/test-count/run", data={
        "csrf_token": csrf, "request_token": "tok-bad-123", "back": "task", "payload": payload})
    text = resp.get_data(as_text=True)
    assert resp.status_code == 400, text[:300]
    assert reason in html.unescape(text.split('id="error"', 1)[1].split("</p>", 1)[0])
    assert 'id="payload"' in text  # the task's page again, the text kept to be corrected
    assert count(app) == 0


@SQLITE
def test_run_now_takes_a_payload_and_refuses_one_that_is_not_an_object(app):
    task_infos(app)
    started = run_now("test-count", payload={"name": "Ada"}, app=app)
    assert json.loads(row(app, started.id)["payload"]) == {"name": "Ada", "manual": True}
    with pytest.raises(InvalidJob, match="payload must be a JSON object"):
        run_now("test-count", payload=["Ada"], again=True, app=app)
    with pytest.raises(InvalidJob, match="nested more than 100 levels"):
        deep: dict = {}
        for _ in range(120):
            deep = {"a": deep}
        run_now("test-count", payload=deep, again=True, app=app)
    assert count(app) == 1


@SQLITE
def test_run_now_shows_the_handlers_own_example_payload(app):
    """The Run now box's placeholder is the handler's EXAMPLE_PAYLOAD, `{}` without one
    (not one task's example on every task)."""
    from cronjobs import CronJobHandler

    class ExampleExecute(CronJobHandler):
        TYPE = "test.example.execute"
        EXAMPLE_PAYLOAD = {"chat_id": 42, "text": "Grüße <b>"}

        def handle(self, payload, job):
            return True

    app.handlers.register(ExampleExecute.TYPE, ExampleExecute)
    client = web_client(app)
    box = page(client, "/tasks/test-example").split('id="payload"', 1)[1].split(">", 1)[0]
    assert html.unescape(re.search(r'placeholder="([^"]*)"', box)[1]) == \
        '{"chat_id": 42, "text": "Grüße <b>"}'
    other = page(client, "/tasks/test-count").split('id="payload"', 1)[1].split(">", 1)[0]
    assert 'placeholder="{}"' in other and "Ada" not in other


@SQLITE
def test_an_unknown_task_says_a_new_handler_needs_a_restart(app):
    text = page(web_client(app), "/tasks/added-later", 404)
    assert "unknown task &#39;added-later&#39;" in text
    assert "appears once the dashboard is restarted" in text
