"""What a new user stumbled on, fixed: logged out there is no nav and no Log out; the
language switch keeps the page's path and query; the Job page's tabs are exclusive; a
running job shows its elapsed time, not empty Result and Log boxes; a last run whose row
was not kept says so without a link (translated); frequency words are translated."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from html import unescape

import pytest

from cronjobs.clock import FrozenClock
from cronjobs.schedule.tasks import task_infos
from cronjobs.store.models import cronjob_runtime
from dashboard_helpers import BEARER, TOKEN, add_row, login, web_client

T0 = datetime(2026, 1, 5, 12, 30, 5)
pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def app(make_app):
    return make_app(clock=FrozenClock(T0), dashboard_token=TOKEN)


def page(client, path: str, code: int = 200, headers: dict | None = None) -> str:
    resp = client.get(path, headers=BEARER if headers is None else headers)
    assert resp.status_code == code, (path, resp.get_data(as_text=True)[:800])
    return resp.get_data(as_text=True)


def lang_links(text: str) -> dict[str, str]:
    return {lang: unescape(href) for href, lang in
            re.findall(r'<a href="([^"]*)" lang="(en|tr)"', text)}


def test_logged_out_there_is_no_nav_and_no_log_out(app):
    client = web_client(app)
    text = page(client, "/", 401, headers={})
    assert 'name="token"' in text and 'id="nav"' not in text and "Log out" not in text
    assert re.findall(r'<button type="submit"[^>]*>([^<]*)<', text) == ["Log in"]
    assert "Log out" not in page(client, "/login", headers={})
    login(client)
    text = page(client, "/", headers={})
    assert 'id="nav"' in text and "Log out" in text and 'href="/tasks"' in text


def test_the_language_switch_keeps_path_and_query(app):
    client = web_client(app)
    links = lang_links(page(client, "/queue?status=failed&title=a%20b&before=40&lang=en"))
    assert links == {"en": "/queue?status=failed&title=a+b&before=40&lang=en",
                     "tr": "/queue?status=failed&title=a+b&before=40&lang=tr"}
    job = add_row(app, status="completed")
    assert lang_links(page(client, f"/jobs/{job}?tab=results"))["tr"] == (
        f"/jobs/{job}?tab=results&lang=tr")
    assert lang_links(page(client, "/tasks/test-count"))["tr"] == "/tasks/test-count?lang=tr"
    logged_out = page(web_client(app), "/queue?status=pending", 401, headers={})
    assert lang_links(logged_out)["tr"] == "/queue?status=pending&lang=tr"  # the login page
    assert "<h1>Kuyruk</h1>" in page(client, links["tr"])


def test_the_job_tabs_are_exclusive(app):
    job = add_row(app, status="completed", payload={"kept": "in the overview"},
                  result_payload={"mode": "str", "text": "the summary"}, process_logs="a log\n")
    client = web_client(app)
    overview = page(client, f"/jobs/{job}")
    assert 'id="payload"' in overview and 'id="log"' in overview and 'id="results"' not in overview
    results = page(client, f"/jobs/{job}?tab=results")
    assert 'id="results"' in results and "the summary" in results
    for part in ('id="payload"', 'id="log"', 'class="facts"', "in the overview"):
        assert part not in results, part


def test_a_running_job_shows_its_elapsed_time_not_empty_boxes(app):
    running = add_row(app, status="running", attempts=1, started_at=T0 - timedelta(seconds=75))
    text = page(web_client(app), f"/jobs/{running}")
    assert '<span class="running-for" id="elapsed">Running for 1 min 15 sec</span>' in text
    assert '<td id="duration">1 min 15 sec so far</td>' in text
    assert 'id="result"' not in text and 'id="log"' not in text and 'id="not-yet"' in text
    done = add_row(app, status="completed", started_at=T0 - timedelta(seconds=3),
                   finished_at=T0, result_payload={"ok": True}, process_logs="done\n")
    text = page(web_client(app), f"/jobs/{done}")
    assert 'id="result"' in text and 'id="log"' in text and "3.000 s" in text
    assert "running-for" not in text and 'id="not-yet"' not in text


def test_a_last_run_whose_row_was_not_kept_has_no_link(app):
    task_infos(app)
    kept = add_row(app, type="test.count.discover", status="completed")
    with app.engine.begin() as conn:  # the cancelled childless row was deleted
        for task, job_id, status in (("tls-certexpiry", 999, "deleted"),
                                     ("http-uptime", 998, "completed"),  # removed by cleanup
                                     ("test-count", kept, "completed")):
            conn.execute(cronjob_runtime.update().where(cronjob_runtime.c.task == task)
                         .values(last_job_id=job_id, last_status=status, last_run_at=T0))
    client = web_client(app)
    text = page(client, "/tasks")

    def cell(task: str) -> str:
        return text.split(f'data-task="{task}"', 1)[1].split('class="last-run">', 1)[1] \
            .split("</td>", 1)[0]

    assert "no rows kept (cancelled, nothing to do)" in cell("tls-certexpiry")
    assert "/jobs/999" not in text and "/jobs/998" not in text
    assert "row no longer kept" in cell("http-uptime")
    assert f'href="/jobs/{kept}"' in cell("test-count")
    assert "no rows kept" in page(client, "/tasks/tls-certexpiry")
    turkish = page(client, "/tasks?lang=tr")
    assert "satır tutulmadı (iptal edildi, yapılacak bir şey yoktu)" in turkish


def test_frequency_words_are_translated(make_app):
    app = make_app(clock=FrozenClock(T0), dashboard_token=TOKEN,
                   tasks={"test-count": {"frequency": "hour"},
                          "tls-certexpiry": {"frequency": "month"}})
    client = web_client(app)
    english = page(client, "/tasks?lang=en")

    def frequency(text: str, task: str) -> str:
        return text.split(f'data-task="{task}"', 1)[1].split('class="frequency">', 1)[1] \
            .split("</td>", 1)[0].strip()

    assert frequency(english, "http-uptime") == "every minute"
    assert frequency(english, "cronjobs-cleanup") == "every day"
    assert frequency(english, "cronjobs-health") == "<code>*/5 * * * *</code>"
    turkish = page(client, "/tasks?lang=tr")
    assert frequency(turkish, "http-uptime") == "her dakika"
    assert frequency(turkish, "cronjobs-cleanup") == "her gün"
    assert frequency(turkish, "test-count").startswith("her saat")  # (an override, marked)
    assert frequency(turkish, "tls-certexpiry").startswith("her ay")
    assert ">minute<" not in turkish and ">day<" not in turkish
