"""A real `cronjobs dashboard` process on MariaDB and PostgreSQL shows a row holding lone
surrogates, 10,000-deep JSON and multi-megabyte texts in Chromium (the page renders, the
texts are cut at 64 KB with their download links), and its memory stays bounded while the
page and the whole downloads are fetched again and again."""

from __future__ import annotations

import json

import psutil
import pytest
import sqlalchemy as sa

from conftest import cli_env, new_database
from cronjobs.clock import utcnow
from cronjobs.migrate import upgrade
from cronjobs.store.engines import make_engine
from cronjobs.store.models import cronjob_queue as q
from dashboard_process import Dashboard, request
from test_browser import CHROMIUM, FLAGS

pytestmark = pytest.mark.slow
TOKEN = "stored-data-browser-token-0123"
SURROGATE = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")  # as subprocess gives it
DEEP = "[" * 10_000 + "]" * 10_000
BIG = 3_000_000  # bytes of the result and of the process log
GROWTH_MAX = 30_000_000  # bytes of RSS a dashboard may gain over 15 fetches of ~6 MB


def store_rows(engine: sa.Engine) -> tuple[int, int]:
    """A row with surrogates and deep JSON, and a row with 3 MB result and log."""
    now = utcnow()
    base = {"type": "test.summary.execute", "queue": "default", "status": "completed",
            "priority": 5, "attempts": 1, "max_attempts": 3, "created_at": now,
            "updated_at": now, "started_at": now, "finished_at": now}
    result = json.dumps({"blob": "é" * (BIG // 2)}, ensure_ascii=False)
    log = "a line of the process log ✓\n" * (BIG // 30)
    with engine.begin() as conn:
        odd = conn.execute(q.insert().values(
            **base, title="odd", payload=json.dumps({"out": SURROGATE}),
            result_payload=DEEP)).inserted_primary_key[0]
        large = conn.execute(q.insert().values(**base, title="large", payload="{}")
                             ).inserted_primary_key[0]
        for column, text in (("result_payload", result), ("process_logs", log)):
            conn.execute(q.update().where(q.c.id == large).values({column: text[:4_000_000]}))
            for i in range(4_000_000, len(text), 4_000_000):
                conn.execute(q.update().where(q.c.id == large)
                             .values({column: q.c[column] + text[i:i + 4_000_000]}))
    return odd, large


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"])
def test_stored_data_renders_in_a_browser_and_memory_stays_bounded(backend, tmp_path):
    from playwright.sync_api import sync_playwright

    url, drop = new_database(backend, tmp_path)
    engine = make_engine(url)
    upgrade(engine)
    odd, large = store_rows(engine)
    dashboard = Dashboard(cli_env(url, CRONJOBS_DASHBOARD_TOKEN=TOKEN), tmp_path).wait_ready()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(dashboard.url + "/login")
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button")
            page.wait_for_url(dashboard.url + "/")
            for path in (f"/jobs/{odd}", f"/jobs/{odd}?tab=results"):
                assert page.goto(dashboard.url + path).status == 200, path
            page.goto(f"{dashboard.url}/jobs/{odd}")
            assert "caf\ufffd \ufffd" in page.locator("#payload").inner_text()
            assert page.locator("#result").inner_text() == DEEP
            answer = page.goto(f"{dashboard.url}/jobs/{large}")
            assert answer.status == 200 and len(answer.body()) < 400_000
            for name in ("result", "log"):
                assert len(page.locator(f"#{name}").inner_text().encode()) <= 65_536
                assert page.locator(f"a[href='/jobs/{large}/raw/{name}']").count() == 1
            assert page.get_by_text("The first 64 KB of").count() >= 2 and not errors
            browser.close()
        rss = psutil.Process(dashboard.proc.pid).memory_info
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        paths = [f"/jobs/{large}", f"/jobs/{large}/raw/result", f"/jobs/{large}/raw/log"]
        for path in paths:  # warm up: imports, caches, the allocator's first arenas
            assert request(dashboard.url + path, headers=bearer).status == 200
        before = rss().rss
        for _ in range(5):
            for path in paths:
                answer = request(dashboard.url + path, headers=bearer)
                assert answer.status == 200 and len(answer.body) > 0
        growth = rss().rss - before
        assert growth < GROWTH_MAX, f"the dashboard grew {growth:,} bytes"
    finally:
        assert dashboard.stop() == 0
        engine.dispose()
        drop()
