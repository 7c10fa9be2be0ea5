"""A family in a real browser (Debian's Chromium through Playwright, the dashboard served
from this process on MariaDB): the task page's family line at 1280 px and on a 390 px
phone, the family page's progress bar moving while rows finish between two polls, and
Cancel family (its confirmation, then the pending rows cancelled)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa
from werkzeug.serving import make_server

from cronjobs.clock import utcnow
from cronjobs.store.models import cronjob_queue as q
from cronjobs.web import create_app
from dashboard_helpers import TOKEN, add_row
from test_browser import CHROMIUM, FLAGS

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["mariadb"], indirect=True)]
WAIT_MS = 15_000  # the family page polls every 2 s


@pytest.fixture
def served(make_app):
    app = make_app(dashboard_token=TOKEN)
    server = make_server("127.0.0.1", 0, create_app(app), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield app, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)


def ids_of(app, root: int, status: str) -> list[int]:
    with app.engine.connect() as conn:
        return [r[0] for r in conn.execute(sa.select(q.c.id).where(
            q.c.root_id == root, q.c.status == status).order_by(q.c.id))]


def finish(app, ids: list[int]) -> None:
    now = utcnow()
    with app.engine.begin() as conn:
        conn.execute(q.update().where(q.c.id.in_(ids)).values(
            status="completed", started_at=now - timedelta(seconds=1), finished_at=now))


def test_family_line_progress_bar_and_cancel_family(served):
    from playwright.sync_api import sync_playwright

    app, base = served
    start = utcnow() - timedelta(seconds=30)
    root = add_row(app, type="test.count.discover", status="completed", attempts=1,
                   started_at=start, finished_at=start + timedelta(seconds=1))
    for i in range(10):
        add_row(app, type="test.count.execute", parent_id=root, root_id=root,
                status="completed" if i < 2 else "pending", started_at=start,
                finished_at=start + timedelta(seconds=5) if i < 2 else None)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            desk = browser.new_context(viewport={"width": 1280, "height": 860})
            page = desk.new_page()
            page.goto(base + "/login")
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button")
            page.wait_for_url(base + "/")
            state = desk.storage_state()

            page.goto(f"{base}/tasks/test-count")
            line = page.locator(f'#runs tr[data-id="{root}"] .family-line')
            assert line.is_visible() and "10 children: 2 ok, 8 pending" in line.inner_text()
            phone = browser.new_context(viewport={"width": 390, "height": 844},
                                        storage_state=state).new_page()
            phone.goto(f"{base}/tasks/test-count")
            small = phone.locator(f'#runs tr[data-id="{root}"] .family-line')
            assert small.is_visible() and "10 children" in small.inner_text()
            box = small.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1
            phone.goto(f"{base}/jobs/{root}/family")
            assert phone.locator("#progress").is_visible()

            page.goto(f"{base}/jobs/{root}/family")
            assert page.get_attribute("#progress", "data-done") == "2"
            width = page.locator("#progress .seg-completed").bounding_box()["width"]
            finish(app, ids_of(app, root, "pending")[:4])  # between two polls
            page.locator('#progress[data-done="6"]').wait_for(timeout=WAIT_MS)  # the poll
            assert page.locator("#progress .seg-completed").bounding_box()["width"] > width
            assert "6 of 10 rows finished" in page.inner_text("#family-done")

            page.click("#cancel-family")
            page.wait_for_url(f"{base}/jobs/{root}/family/cancel")
            assert page.inner_text("#pending") == "4"
            page.click("#confirm")
            page.wait_for_url(f"{base}/jobs/{root}/family?cancelled=4")
            assert page.locator("#cancel-done").is_visible()
            assert len(ids_of(app, root, "cancelled")) == 4 and not ids_of(app, root, "pending")
            assert page.get_attribute("#progress", "data-done") == "10"
        finally:
            browser.close()
