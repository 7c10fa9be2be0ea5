"""Dashboard pages: queue filters and keyset pages, capped counts,
Results tab safety, escaping of every value from outside, exact big integers, Run now,
retry/cancel, failed groups, languages."""

from __future__ import annotations

import html

import pytest
import sqlalchemy as sa

from cronjobs import store
from cronjobs.schedule.taskrows import task_rows
from cronjobs.schedule.tasks import set_enabled, task_infos
from cronjobs.store.models import cronjob_runtime, cronjob_worker
from dashboard_helpers import (
    BEARER,
    TOKEN,
    add_row,
    add_rows,
    count,
    db_now,
    login,
    row,
    wait_operation,
    web_client,
)

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
XSS = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', '"onmouseover=alert(1) x="']
TEXT = "emoji 🚀🔥 and Persian: صف کارها آماده است"


@pytest.fixture
def app(make_app):
    return make_app(dashboard_token=TOKEN)


def page(client, path: str, code: int = 200, **kw) -> str:
    resp = client.get(path, headers={**BEARER, **kw.pop("headers", {})}, **kw)
    assert resp.status_code == code, (path, resp.get_data(as_text=True)[:800])
    return resp.get_data(as_text=True)


def ids_in(text: str) -> list[int]:
    import re

    return [int(m) for m in re.findall(r'<td><a href="/jobs/(\d+)">', text)]


def test_queue_filters_and_metacharacters_are_data(app):
    a = add_row(app, title="100%_done", status="failed", error="x")
    b = add_row(app, title="plain title", type="test.shape.execute")
    c = add_row(app, title="it's a quote \\ backslash")
    client = web_client(app)
    assert ids_in(page(client, "/queue?title=%25")) == [a]
    assert ids_in(page(client, "/queue?title=_")) == [a]
    assert ids_in(page(client, "/queue?title=it%27s")) == [c]
    assert ids_in(page(client, "/queue?title=%5C")) == [c]
    assert ids_in(page(client, "/queue?title=%27%20OR%201%3D1%20--")) == []
    assert ids_in(page(client, "/queue?type=x%27%20OR%20%271%27%3D%271")) == []
    assert ids_in(page(client, "/queue?type=test.shape.execute")) == [b]
    assert ids_in(page(client, "/queue?status=failed")) == [a]
    assert ids_in(page(client, "/queue?task=test-shape")) == [b]
    for bad in ("status=failed%27%20OR%201%3D1", "parent=1%20OR%201%3D1", "before=-1",
                "task=%27%3B%20DROP%20TABLE%20cronjob_queue%3B%20--", "limit=100000"):
        text = page(client, f"/queue?{bad}", 400)
        assert "must" in text or "unknown task" in text
    api = client.get("/api/jobs?title=%25", headers=BEARER).get_json()
    assert [r["id"] for r in api] == [a]
    assert count(app) == 3  # nothing dropped


def test_keyset_pages_and_title_search_windows(app, monkeypatch):
    add_rows(app, 120)
    client = web_client(app)
    first = ids_in(page(client, "/queue"))
    assert len(first) == 50 and first == sorted(first, reverse=True)
    with app.engine.connect() as conn:
        p1 = store.views.list_rows(conn)
        p2 = store.views.list_rows(conn, before=p1.older)
        p3 = store.views.list_rows(conn, before=p2.older)
        back = store.views.list_rows(conn, after=p2.newer)
    assert [r["id"] for r in p1.rows] == first and p1.newer is None
    assert len(p3.rows) == 20 and p3.older is None
    assert [r["id"] for r in back.rows] == first  # "newer" from page 2 is page 1 again
    all_ids = [r["id"] for r in p1.rows + p2.rows + p3.rows]
    assert len(set(all_ids)) == 120
    assert ids_in(page(client, f"/queue?before={p1.older}")) == [r["id"] for r in p2.rows]
    # a title search looks at a bounded window of ids per page, then offers to go on
    monkeypatch.setattr(store.views, "SEARCH_WINDOW", 30)
    text = page(client, "/queue?title=row%201")
    hits = ids_in(text)
    assert hits and all("row 1" in row(app, i)["title"] for i in hits)
    assert "Search older rows" in text
    with app.engine.connect() as conn:
        found, before = [], None
        while True:
            got = store.views.list_rows(conn, title="row 1", before=before)
            found += [r["id"] for r in got.rows]
            before = got.older or got.searched_to
            if before is None:
                break
    expected = [i for i in all_ids if "row 1" in row(app, i)["title"]]
    assert sorted(found, reverse=True) == sorted(expected, reverse=True)


@SQLITE
def test_counts_are_capped_and_execute_throughput_shown(app):
    add_rows(app, 10_003)
    done = app.clock.now()
    add_row(app, status="completed", finished_at=done)
    add_row(app, status="completed", finished_at=done, type="test.count.discover")
    with app.engine.connect() as conn:
        counts = store.views.count_by_status(conn)
        speed = store.views.throughput(conn, done)
    assert counts["pending"] == (10_000, True) and counts["completed"] == (2, False)
    assert speed["hour"] == (1, False) == speed["day"]  # only .execute rows count
    text = page(web_client(app), "/queue")
    assert "10,000+" in text
    assert "10.000+" in page(web_client(app), "/queue?lang=tr")


@SQLITE
def test_discover_rows_show_children_counts_and_job_page_links(app):
    parent = add_row(app, type="test.count.discover", status="completed")
    for status in ("completed", "completed", "failed", "pending"):
        add_row(app, parent_id=parent, status=status, title=f"child {status}")
    client = web_client(app)
    text = page(client, "/queue?type=test.count.discover")
    assert f'/queue?parent={parent}&amp;status=completed' in text  # (& escaped in HTML)
    job = page(client, f"/jobs/{parent}")
    assert "Children" in job and job.count('class="status st-completed"') >= 3
    assert f"/queue?parent={parent}" in job
    kid = ids_in(page(client, f"/queue?parent={parent}&status=failed"))
    assert len(kid) == 1 and f'href="/jobs/{parent}"' in page(client, f"/jobs/{kid[0]}")


@SQLITE
def test_results_tab_str_is_text_markup_is_html_and_a_raise_is_an_error_box(app):
    plain = add_row(app, status="completed", result_payload={"mode": "str", "text": "<i>x</i>"})
    marked = add_row(app, status="completed", result_payload={"mode": "markup", "text": "<i>y</i>"})
    broken = add_row(app, status="completed", result_payload={"mode": "raise"},
                     payload={"kept": "payload still shown"}, process_logs="log line kept\n")
    client = web_client(app)
    text = page(client, f"/jobs/{plain}?tab=results")
    assert "&lt;b&gt;plain&lt;/b&gt; &lt;i&gt;x&lt;/i&gt;" in text and "<b>plain</b>" not in text
    text = page(client, f"/jobs/{marked}?tab=results")
    assert '<b id="trusted-summary">&lt;i&gt;y&lt;/i&gt;</b>' in text
    text = page(client, f"/jobs/{broken}?tab=results")
    assert 'class="error-box"' in text and "ValueError: summary broke" in text
    assert "<script>alert(1)</script>" not in text
    assert "</html>" in text
    assert "payload still shown" not in text and "log line kept" not in text  # tabs exclusive
    # render_summary runs only when the Results tab is opened; the row's texts are there
    text = page(client, f"/jobs/{broken}")
    assert "ValueError" not in text
    assert "payload still shown" in text and "log line kept" in text


@SQLITE
def test_values_from_outside_are_escaped_on_every_page(app):
    nasty = " ".join(XSS) + " " + TEXT
    job = add_row(app, status="failed", title=nasty[:255], error=nasty, process_logs=nasty + "\n",
                  payload={"x": nasty, "mode": "str", "text": nasty},
                  result_payload={"mode": "str", "text": nasty})
    odd = add_row(app, type=XSS[0] + ".execute", status="failed", error=XSS[1])
    add_row(app, type="test.count.discover", status="completed", title=XSS[2])
    now = db_now(app)
    with app.engine.begin() as conn:
        conn.execute(cronjob_worker.insert().values(
            id=XSS[1][:100], host=XSS[0], pid=1, queues=XSS[0] + ",default", status="running",
            started_at=now, last_seen_at=now, jobs_done=1, current_jobs=""))
    client = web_client(app)
    paths = ["/", "/queue", f"/queue?title={XSS[0]}", "/queue?status=failed", f"/jobs/{job}",
             f"/jobs/{job}?tab=results", f"/jobs/{odd}", f"/jobs/{odd}?tab=results", "/workers",
             "/failed"]
    for path in paths:
        text = page(client, path)
        for raw in XSS + ['"onmouseover=', "<img", "<script>"]:
            assert raw not in text, (path, raw)
    text = page(client, f"/jobs/{job}")
    assert html.escape(XSS[0], quote=True) in text and TEXT in text
    assert "module not installed" in page(client, f"/jobs/{odd}")
    assert TEXT in page(client, "/queue")


@SQLITE
def test_payload_and_result_integers_beyond_2_53_are_exact(app):
    job = add_row(app, status="completed",
                  payload='{"n": 9007199254740993, "big": 123456789012345678901234567890}',
                  result_payload='{"total": 18446744073709551617}')
    text = page(web_client(app), f"/jobs/{job}")
    for digits in ("9007199254740993", "123456789012345678901234567890", "18446744073709551617"):
        assert digits in text


@SQLITE
def test_running_and_due_rows_refresh_finished_ones_do_not(app):
    client = web_client(app)
    assert 'http-equiv="refresh"' in page(client, f"/jobs/{add_row(app, status='running')}")
    assert 'http-equiv="refresh"' in page(client, f"/jobs/{add_row(app)}")
    assert 'http-equiv="refresh"' not in page(client, f"/jobs/{add_row(app, status='completed')}")


@SQLITE
def test_run_now_one_row_per_request_token_and_never_the_slot(app):
    client = web_client(app)
    csrf = login(client)
    task_infos(app)
    first = client.post("/tasks/test-count/run",
                        data={"csrf_token": csrf, "request_token": "tokA-123456"})
    again = client.post("/tasks/test-count/run",
                        data={"csrf_token": csrf, "request_token": "tokA-123456"})
    assert first.status_code == again.status_code == 303
    assert first.headers["Location"] == again.headers["Location"]  # a double click: one row
    job_id = int(first.headers["Location"].rsplit("/", 1)[1])
    job = row(app, job_id)
    assert (job["type"], job["priority"], job["status"]) == ("test.count.discover", 1, "pending")
    second = client.post("/tasks/test-count/run",
                         data={"csrf_token": csrf, "request_token": "tokB-123456"})
    assert second.headers["Location"] != first.headers["Location"]  # a deliberate second click
    assert count(app, type="test.count.discover") == 2
    with app.engine.connect() as conn:
        rt = conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == "test-count")).mappings().one()
    assert rt["last_slot"] is None and rt["last_run_at"] is None and rt["last_job_id"] is None
    assert rt["last_manual_job_id"] == int(second.headers["Location"].rsplit("/", 1)[1])
    # each render of the Tasks page carries a fresh token
    import re

    tokens = [re.findall(r'name="request_token" value="([^"]+)"', page(client, "/tasks"))
              for _ in range(2)]
    assert tokens[0] and set(tokens[0]).isdisjoint(tokens[1])


@SQLITE
def test_run_now_refused_with_a_visible_reason(app):
    client = web_client(app)
    csrf = login(client)
    set_enabled("test-count", False, app=app)
    text = page(client, "/tasks")
    assert "disabled" in text
    resp = client.post("/tasks/test-count/run",
                       data={"csrf_token": csrf, "request_token": "tok-12345678"})
    assert resp.status_code == 409 and "is disabled" in resp.get_data(as_text=True)
    resp = client.post("/tasks/test-gone/run",
                       data={"csrf_token": csrf, "request_token": "tok-12345679"})
    assert resp.status_code == 409 and "module not installed" in resp.get_data(as_text=True)
    assert count(app) == 0
    assert client.post("/tasks/nope/run", data={"csrf_token": csrf}).status_code == 404


@SQLITE
def test_kill_switch_from_the_tasks_page(app):
    client = web_client(app)
    csrf = login(client)
    assert client.post("/tasks/test-count/enabled",
                       data={"csrf_token": csrf, "enabled": "0"}).status_code == 303
    assert not next(r for r in task_rows(app) if r.task == "test-count").enabled
    assert client.post("/tasks/test-count/enabled",
                       data={"csrf_token": csrf, "enabled": "maybe"}).status_code == 400


@SQLITE
def test_retry_cancel_and_failed_groups(app):
    a1 = add_row(app, status="failed", error="HTTP 500\nsecond line", attempts=3,
                 finished_at=app.clock.now())
    a2 = add_row(app, status="failed", error="HTTP 500\nsecond line", attempts=3)
    b1 = add_row(app, status="failed", error="timeout", type="test.shape.execute")
    pend = add_row(app)
    running = add_row(app, status="running")
    client = web_client(app)
    csrf = login(client)
    text = page(client, "/failed")
    assert "HTTP 500" in text and "timeout" in text and "Retry all 2" in text
    resp = client.post("/failed/retry", data={"csrf_token": csrf, "job": str(a2)})
    assert resp.status_code == 303 and resp.headers["Location"] == "/operations/1"
    assert wait_operation(app, 1)["changed_rows"] == 2  # a bulk operation, run in a thread
    assert "2 of 2 done" in page(client, "/operations/1")
    assert [row(app, i)["status"] for i in (a1, a2, b1)] == ["pending", "pending", "failed"]
    assert row(app, a1)["attempts"] == 0 and "retried by dashboard" in row(app, a1)["process_logs"]
    assert client.post(f"/jobs/{b1}/retry", data={"csrf_token": csrf}).status_code == 303
    assert row(app, b1)["status"] == "pending" and "No failed rows." in page(client, "/failed")
    resp = client.post(f"/jobs/{b1}/retry", data={"csrf_token": csrf})
    assert resp.status_code == 400 and "only failed rows" in resp.get_data(as_text=True)
    assert client.post(f"/jobs/{pend}/cancel", data={"csrf_token": csrf}).status_code == 303
    assert row(app, pend)["status"] == "cancelled"
    resp = client.post(f"/jobs/{running}/cancel", data={"csrf_token": csrf})
    assert resp.status_code == 400 and row(app, running)["status"] == "running"
    # no such row
    assert client.post("/jobs/999999/cancel", data={"csrf_token": csrf}).status_code == 404


@SQLITE
def test_workers_page_shows_heartbeats_and_queues_without_workers(app):
    now = db_now(app)
    with app.engine.begin() as conn:
        conn.execute(cronjob_worker.insert().values(
            id="host-a:1", host="host-a", pid=1, queues="default", status="running",
            started_at=now, last_seen_at=now, jobs_done=7, current_jobs="", memory_mb=123.4))
    add_row(app, queue="orphaned")
    text = page(web_client(app), "/workers")
    assert "host-a:1" in text and "123 MB" in text and ">7<" in text
    assert "Queue maintenance has no live worker." in text
    assert "Queue orphaned has due rows and no live worker." in text


@SQLITE
def test_languages_from_query_or_accept_language_and_missing_keys_raw(app):
    client = web_client(app)
    assert "<h1>Tasks</h1>" in page(client, "/tasks")
    assert "<h1>Görevler</h1>" in page(client, "/tasks?lang=tr")
    assert "<h1>Görevler</h1>" in page(client, "/tasks")  # remembered
    fresh = web_client(app)
    assert "<h1>Görevler</h1>" in page(fresh, "/tasks",
                                       headers={"Accept-Language": "tr-TR,tr;q=0.9"})
    assert "<h1>Tasks</h1>" in page(fresh, "/tasks?lang=en")
    with fresh.application.test_request_context("/?lang=tr"):
        from flask_babel import gettext

        from cronjobs.i18n import gettext as handler_gettext

        assert gettext("Queue") == "Kuyruk"
        assert gettext("no.such.key") == "no.such.key"
        assert handler_gettext("Error") == "Hata"  # handlers' labels follow the request
        assert handler_gettext("no.such.key") == "no.such.key"
    assert handler_gettext("Error") == "Error"  # outside a request


@SQLITE
def test_api_tasks_is_the_task_row_builder(app):
    api = web_client(app).get("/api/tasks", headers=BEARER).get_json()
    rows = task_rows(app)
    assert [r["task"] for r in api] == [r.task for r in rows]
    uptime = next(r for r in api if r["task"] == "http-uptime")
    assert uptime["types"] == ["http.uptime.discover", "http.uptime.execute"]
    assert uptime["source"] == "built-in" and uptime["frequency"] == "minute"
    assert next(r for r in api if r["task"] == "test-count")["source"] == "folder"
    assert next(r for r in api if r["task"] == "test-gone")["available"] is False
    text = page(web_client(app), "/tasks")
    assert "module not installed" in text and "cronjobs-health" in text
