"""The dashboard moving in a real browser (Chromium driven by Playwright, one `cronjobs
dashboard` process on MariaDB for the module): the Overview's charts appear and change while
rows finish, the Queue and Job pages (with the job's children) follow rows that change in the
database without a reload, a task's page shows its history and runs it with a payload, rows
ticked in the Queue stay ticked while it polls and are cancelled or deleted in bulk (with and
without JavaScript), and every page, with its bulk controls (and Stop's confirmation), fits a
390 px wide phone without horizontal scrolling."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
import sqlalchemy as sa

from conftest import cli_env, new_database
from cronjobs.clock import utcnow
from cronjobs.migrate import upgrade
from cronjobs.store.engines import make_engine
from cronjobs.store.models import cronjob_queue as q
from dashboard_process import Dashboard
from test_browser import CHROMIUM, FLAGS

pytestmark = pytest.mark.slow
TOKEN = "live-browser-token-0123456789"
WAIT_MS = 20_000  # the pages poll every 2 to 5 s; the Overview keeps a snapshot 3 s


@dataclass
class Served:
    base: str
    engine: sa.Engine
    browser: object
    page: object
    state: dict


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("live-browser")
    url, drop = new_database("mariadb", folder)
    migrated = make_engine(url)
    upgrade(migrated)
    migrated.dispose()
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    dashboard = Dashboard(cli_env(url, CRONJOBS_DASHBOARD_TOKEN=TOKEN), folder).wait_ready()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            context = browser.new_context(viewport={"width": 1280, "height": 860})
            page = context.new_page()
            page.goto(dashboard.url + "/login")
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button")
            page.wait_for_url(dashboard.url + "/")
            yield Served(dashboard.url, engine, browser, page, context.storage_state())
            browser.close()
    finally:
        assert dashboard.stop() == 0
        engine.dispose()
        drop()


def insert(engine: sa.Engine, **values) -> int:
    now = utcnow()
    row = {"type": "test.summary.execute", "queue": "default", "status": "pending",
           "priority": 5, "payload": "{}", "attempts": 0, "max_attempts": 3,
           "created_at": now, "updated_at": now, **values}
    with engine.begin() as conn:
        return conn.execute(q.insert().values(**row)).inserted_primary_key[0]


def update(engine: sa.Engine, ids: list[int], **values) -> None:
    with engine.begin() as conn:
        conn.execute(q.update().where(q.c.id.in_(ids)).values(updated_at=utcnow(), **values))


def finish(engine: sa.Engine, ids: list[int], status: str = "completed") -> None:
    now = utcnow()
    update(engine, ids, status=status, attempts=1, started_at=now - timedelta(seconds=1),
           finished_at=now)


def mark_page(page) -> None:
    """Set a value in the page's window: it survives only as long as no reload happens."""
    page.evaluate("window.__notReloaded = true")


def not_reloaded(page) -> bool:
    return page.evaluate("window.__notReloaded === true")


def test_the_overview_charts_appear_and_change_while_rows_finish(served):
    page, engine = served.page, served.engine
    ids = [insert(engine, title=f"overview {i}") for i in range(5)]
    page.goto(served.base + "/")
    chart = page.locator("svg#chart-hour")
    assert chart.is_visible() and page.locator("svg#chart-day").is_visible()
    before = int(chart.get_attribute("data-total").replace(",", ""))
    mark_page(page)
    finish(engine, ids[:3])
    page.wait_for_function(
        f"() => document.querySelector('#chart-hour').dataset.total === '{before + 3}'",
        timeout=WAIT_MS)
    assert page.locator("#chart-hour rect.seg-completed").count() >= 1
    finish(engine, ids[3:], "failed")
    page.wait_for_function(
        "() => document.querySelector('#failed-hour').textContent.trim() === '2'",
        timeout=WAIT_MS)
    assert page.locator("#chart-hour rect.seg-failed").count() >= 1
    assert page.locator("#queues").is_visible() and not_reloaded(page)


def test_the_queue_follows_a_row_without_a_reload(served):
    page, engine = served.page, served.engine
    title = "follow-" + uuid.uuid4().hex[:8]
    job = insert(engine, title=title)
    page.goto(f"{served.base}/queue?title={title}")
    assert page.locator(f"tr[data-id='{job}']").get_attribute("data-status") == "pending"
    mark_page(page)
    update(engine, [job], status="running", attempts=1, started_at=utcnow())
    page.wait_for_selector(f"tr[data-id='{job}'][data-status='running']", timeout=WAIT_MS)
    finish(engine, [job])
    page.wait_for_selector(f"tr[data-id='{job}'][data-status='completed']", timeout=WAIT_MS)
    assert not_reloaded(page)
    assert page.locator(".reload").is_hidden() and page.locator(".live-on").is_visible()


def test_a_job_and_its_children_update_without_a_reload(served):
    page, engine = served.page, served.engine
    now = utcnow()
    parent = insert(engine, type="test.count.discover", status="completed", attempts=1,
                    started_at=now, finished_at=now)
    kids = [insert(engine, parent_id=parent, title=f"child {i}") for i in range(3)]
    page.goto(f"{served.base}/jobs/{parent}")
    mark_page(page)
    update(engine, kids[:1], status="running", attempts=1, started_at=utcnow())
    page.wait_for_selector(f"#children tr[data-id='{kids[0]}'][data-status='running']",
                           timeout=WAIT_MS)
    finish(engine, kids)
    for kid in kids:
        page.wait_for_selector(f"#children tr[data-id='{kid}'][data-status='completed']",
                               timeout=WAIT_MS)
    page.wait_for_selector("#live[data-live-done='1']", timeout=WAIT_MS)  # polling ended
    assert not_reloaded(page)
    running = insert(engine, status="running", attempts=1,
                     started_at=utcnow() - timedelta(seconds=42))
    page.goto(f"{served.base}/jobs/{running}")
    assert page.locator("#elapsed").inner_text().startswith("Running for 4")
    assert page.locator("#result").count() == 0 and page.locator("#not-yet").is_visible()
    mark_page(page)
    update(engine, [running], result_payload='{"ok": true}')
    finish(engine, [running])
    page.wait_for_selector("h1 .st-completed", timeout=WAIT_MS)
    assert page.locator("#result").count() == 1 and not_reloaded(page)
    assert json.loads(page.locator("pre#result").inner_text()) == {"ok": True}
    assert page.locator("#no-log").inner_text() == "No process log."  # not an empty box


def test_a_tasks_page_shows_its_history_and_runs_it_with_a_payload(served):
    page, engine = served.page, served.engine
    start = utcnow() - timedelta(hours=2)
    for i in range(12):
        at = start + timedelta(minutes=5 * i)
        insert(engine, type="test.count.discover", status="failed" if i % 4 == 3 else "completed",
               attempts=1, started_at=at, finished_at=at + timedelta(seconds=1 + i % 3),
               error="HTTP 503" if i % 4 == 3 else None)
    page.goto(served.base + "/tasks")
    page.click("tr[data-task='test-count'] td.name a")
    page.wait_for_url(served.base + "/tasks/test-count")
    assert page.locator("#runs tbody tr").count() >= 12
    assert page.locator("svg#chart-durations rect.seg-failed").count() >= 3
    assert "Success rate:" in page.locator("#run-stats").inner_text()
    assert page.locator("#fires li").count() == 5
    before = page.locator("#runs tbody tr").count()
    page.fill("#payload", "[1, 2]")
    page.click("form.run-form button.run-now")
    page.wait_for_selector("#error")
    assert "must be a JSON object" in page.locator("#error").inner_text()
    assert page.locator("#payload").input_value() == "[1, 2]"  # kept, to be corrected
    page.fill("#payload", '{"name": "Ada"}')
    page.click("form.run-form button.run-now")
    page.wait_for_url(f"{served.base}/jobs/*")
    shown = json.loads(page.locator("pre#payload").inner_text())
    assert shown == {"name": "Ada", "manual": True}
    page.goto(served.base + "/tasks/test-count")
    assert page.locator("#runs tbody tr").count() == before + 1  # one row, the good one


def test_ticked_rows_survive_polling_and_are_cancelled_then_deleted_in_bulk(served):
    page, engine = served.page, served.engine
    title = "bulk-" + uuid.uuid4().hex[:8]
    later = utcnow() + timedelta(days=1)  # nothing takes them meanwhile
    ids = [insert(engine, title=f"{title} {i}", scheduled_at=later) for i in range(4)]
    page.goto(f"{served.base}/queue?title={title}")
    for job in ids[:2]:
        page.check(f"tr[data-id='{job}'] input.select-row")
    update(engine, [ids[3]], status="running", attempts=1, started_at=utcnow())
    polls = int(page.locator("#live").get_attribute("data-live-polls") or 0)
    page.wait_for_function(  # two polls pass; the ticked list is left as it is
        f"() => Number(document.querySelector('#live').dataset.livePolls) >= {polls + 2}",
        timeout=WAIT_MS)
    assert [page.is_checked(f"tr[data-id='{j}'] input.select-row") for j in ids] == [
        True, True, False, False]
    assert page.locator(f"tr[data-id='{ids[3]}']").get_attribute("data-status") == "pending"
    page.check("#rows input.select-page")  # ticks every row of the page, and clears them
    assert page.locator("#rows input.select-row:checked").count() == 4
    page.uncheck(f"tr[data-id='{ids[3]}'] input.select-row")
    assert not page.is_checked("#rows input.select-page")
    page.uncheck("#rows input.select-page")
    page.check(f"tr[data-id='{ids[3]}'] input.select-row")
    page.check("#rows input.select-page")
    page.uncheck("#rows input.select-page")
    assert page.locator("#rows input.select-row:checked").count() == 0
    for job in ids[:2]:
        page.check(f"tr[data-id='{job}'] input.select-row")
    page.click("#bulk-ticked button.bulk-cancel")
    page.wait_for_url(served.base + "/operations/confirm")
    assert page.locator("#count").inner_text().startswith("2 row(s)")
    page.click("#confirm")
    page.wait_for_selector("h1 .st-done", timeout=WAIT_MS)  # it refreshes until done
    assert page.locator("#changed").inner_text() == "2"
    with engine.connect() as conn:
        rows = dict(conn.execute(sa.select(q.c.id, q.c.status).where(q.c.id.in_(ids))).all())
    assert [rows[j] for j in ids] == ["cancelled", "cancelled", "pending", "running"]
    # without JavaScript: the page's box carries every id of its page; Delete takes the
    # finished ones (the two cancelled rows)
    plain = served.browser.new_context(java_script_enabled=False, storage_state=served.state)
    try:
        bare = plain.new_page()
        bare.goto(f"{served.base}/queue?title={title}")
        bare.check("#rows input.select-page")
        assert bare.locator("#rows input.select-row:checked").count() == 0
        bare.click("#bulk-ticked button.bulk-delete")
        bare.wait_for_url(served.base + "/operations/confirm")
        assert bare.locator("#count").inner_text().startswith("2 row(s)")
        bare.click("#confirm")
        bare.wait_for_selector("h1 .st-done", timeout=WAIT_MS)  # <meta refresh> until done
    finally:
        plain.close()
    with engine.connect() as conn:
        left = dict(conn.execute(sa.select(q.c.id, q.c.status).where(q.c.id.in_(ids))).all())
    assert left == {ids[2]: "pending", ids[3]: "running"}


PHONE_PAGES = ["/", "/tasks", "/tasks/test-count", "/tasks/http-uptime", "/queue",
               "/queue?status=failed&housekeeping=1", "/workers", "/failed", "/flow", "/nowhere"]


def fits(page, what: str) -> None:
    """The page is no wider than the window (no horizontal scrolling)."""
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], (what, width)


def test_every_page_fits_a_phone(served):
    engine = served.engine
    long_word = "https://example.com/" + "a-very-long-path-" * 15
    now = utcnow()
    failed = insert(engine, status="failed", attempts=3, title=long_word[:255],
                    error=f"HTTP 503 from {long_word}", process_logs=long_word + "\n",
                    payload=json.dumps({"url": long_word}), idempotency_key=long_word[:191],
                    worker_id="a-worker-on-a-host-with-a-long-name:12345", started_at=now,
                    finished_at=now, type="a.rather.long.type.name.of.a.plugin.execute")
    running = insert(engine, status="running", attempts=1, title=long_word[:255],
                     worker_id="a-worker-on-a-host-with-a-long-name:12345", started_at=now)
    context = served.browser.new_context(viewport={"width": 390, "height": 844},
                                         storage_state=served.state)
    page = context.new_page()
    try:
        for path in [*PHONE_PAGES, f"/jobs/{failed}", f"/jobs/{failed}?tab=results",
                     f"/failed?group={failed}", f"/jobs/{running}/stop"]:
            page.goto(served.base + path)
            page.wait_for_load_state("load")
            fits(page, path)
            box = page.locator("form.logout button").bounding_box()
            assert box and box["x"] + box["width"] <= 390, (path, box)
            assert page.locator("a[lang=tr]").bounding_box()["x"] < 390, path
            if path.startswith(("/queue", "/failed")):  # the bulk controls are on screen
                controls = page.locator(".bulk-bar button, .actions button, input.select-row, "
                                        "input.select-page")
                assert controls.count() >= 3, path
                for i in range(controls.count()):
                    box = controls.nth(i).bounding_box()
                    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (path, i)
        page.goto(served.base + "/failed")
        page.click("#retry-every button.retry-every")  # the confirmation page
        page.wait_for_url(f"{served.base}/operations/confirm")
        fits(page, "confirm")
        page.click("#confirm")  # a bulk operation's page
        page.wait_for_url(re.compile(r".*/operations/\d+$"))
        fits(page, "operation")
    finally:
        context.close()
    logged_out = served.browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = logged_out.new_page()
        page.goto(served.base + "/")
        assert page.locator("input[name=token]").is_visible()
        assert page.locator("form.logout").count() == 0 and page.locator("#nav").count() == 0
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    finally:
        logged_out.close()
