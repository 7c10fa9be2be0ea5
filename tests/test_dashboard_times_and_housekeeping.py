"""Times on the pages are relative ("3 min. ago", "in 4 min."), translated, with the absolute
UTC time on hover; a retrying row shows when its next attempt is due; the Queue page hides
the platform's own housekeeping rows by default, with a visible toggle, and never reads the
whole table to do so (on SQLite, MariaDB and PostgreSQL)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from cronjobs import store
from cronjobs.clock import FrozenClock
from cronjobs.web.jobs import HOUSEKEEPING_TYPES
from dashboard_helpers import BEARER, TOKEN, add_row, web_client

T0 = datetime(2026, 1, 5, 12, 30, 5)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
ROW_IDS = re.compile(r'<tr data-id="(\d+)"')


@pytest.fixture
def app(make_app):
    return make_app(clock=FrozenClock(T0), dashboard_token=TOKEN)


def page(client, path: str) -> str:
    resp = client.get(path, headers=BEARER)
    assert resp.status_code == 200, (path, resp.get_data(as_text=True)[:800])
    return resp.get_data(as_text=True)


@SQLITE
def test_times_are_relative_translated_and_absolute_on_hover(app):
    job = add_row(app, status="completed", created_at=T0 - timedelta(minutes=3),
                  started_at=T0 - timedelta(minutes=3), finished_at=T0 - timedelta(seconds=40))
    client = web_client(app)
    text = page(client, f"/jobs/{job}")
    assert ('<time datetime="2026-01-05T12:27:05Z" title="2026-01-05 12:27:05 UTC">'
            "3 min. ago</time>") in text
    assert 'title="2026-01-05 12:29:25 UTC">40 sec. ago</time>' in text
    turkish = page(client, f"/jobs/{job}?lang=tr")
    assert 'title="2026-01-05 12:27:05 UTC">3 dk. önce</time>' in turkish
    assert ">40 sn. önce</time>" in turkish


@SQLITE
def test_a_retrying_row_shows_its_next_attempt(app):
    retrying = add_row(app, attempts=1, scheduled_at=T0 + timedelta(minutes=4),
                       error="HTTP 503")
    first = add_row(app, scheduled_at=T0 + timedelta(minutes=4))  # delayed, not retrying
    due = add_row(app, attempts=1, scheduled_at=T0 - timedelta(seconds=5))  # due: no "next"
    client = web_client(app)
    text = page(client, "/queue")
    cells = {int(i): text.split(f'<tr data-id="{i}"', 1)[1].split("</tr>", 1)[0]
             for i in (retrying, first, due)}
    assert ('<span class="next-attempt">next attempt <time datetime="2026-01-05T12:34:05Z" '
            'title="2026-01-05 12:34:05 UTC">in 4 min.</time></span>') in cells[retrying]
    assert "next-attempt" not in cells[first] and "next-attempt" not in cells[due]
    assert "sonraki deneme" in page(client, "/queue?lang=tr")
    assert "next attempt" in page(client, f"/jobs/{retrying}?lang=en")


def test_housekeeping_rows_are_hidden_by_default_with_a_toggle(app):
    mine = add_row(app, type="test.shape.execute", title="my own row")
    housekeeping = [add_row(app, type=t, status="completed") for t in (
        "cronjobs.recoverstale.execute", "cronjobs.cleanup.execute",
        "cronjobs.health.execute", "http.uptime.discover", "http.uptime.execute")]
    lookalike = add_row(app, type="http.uptimeX.execute")  # not under the http.uptime. prefix
    client = web_client(app)
    text = page(client, "/queue")
    assert [int(i) for i in ROW_IDS.findall(text)] == [lookalike, mine]
    assert 'id="show-housekeeping"' in text and 'name="housekeeping"' in text
    shown = page(client, "/queue?housekeeping=1")
    assert sorted(int(i) for i in ROW_IDS.findall(shown)) == sorted(
        [mine, lookalike, *housekeeping])
    assert 'id="hide-housekeeping"' in shown
    assert "housekeeping=1" in shown.split('class="pager"', 1)[0].split("counts", 1)[1]
    for asked in ("/queue?task=http-uptime", "/queue?type=cronjobs.cleanup.execute",
                  "/queue?status=completed&task=cronjobs-health"):
        assert ROW_IDS.findall(page(client, asked)), asked  # asked for: shown
    api = client.get("/api/jobs", headers=BEARER).get_json()  # the JSON list is unchanged
    assert len(api) == 7
    assert len(client.get("/api/jobs?housekeeping=0", headers=BEARER).get_json()) == 2


def test_hidden_rows_are_looked_for_in_bounded_windows(app, monkeypatch):
    mine = add_row(app, type="test.shape.execute")
    for _ in range(40):
        add_row(app, type="cronjobs.recoverstale.execute", status="completed")
    monkeypatch.setattr(store.views, "SEARCH_WINDOW", 25)
    with app.engine.connect() as conn:
        first = store.views.list_rows(conn, hide=HOUSEKEEPING_TYPES)
        assert first.rows == [] and first.searched_to is not None  # 25 ids looked at
        further = store.views.list_rows(conn, hide=HOUSEKEEPING_TYPES, before=first.searched_to)
    assert [r["id"] for r in further.rows] == [mine]
    text = page(web_client(app), "/queue")
    assert "Search older rows" in text


@SQLITE
def test_the_housekeeping_set_is_the_builtin_maintenance_and_the_uptime_check(app):
    registered = set(app.handlers.registered_handlers())
    exact = {t for t in HOUSEKEEPING_TYPES if not t.endswith(".*")}
    assert exact <= registered
    assert {t for t in registered if t.startswith("cronjobs.")} == exact
    assert {t for t in registered if t.startswith("http.uptime.")} == {
        "http.uptime.discover", "http.uptime.execute"}
