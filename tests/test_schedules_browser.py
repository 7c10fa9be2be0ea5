"""The Schedules page in a browser at 1280 and 390 px (Chromium driven by Playwright, one
`cronjobs dashboard` process on SQLite): an entry added through the form is listed and
is a task on the Tasks page, Pause marks it paused and Remove takes it away; every
button is on screen and the page never scrolls sideways."""

from __future__ import annotations

import pytest

from conftest import cli_env
from cronjobs.migrate import upgrade
from cronjobs.store.engines import make_engine
from dashboard_process import Dashboard
from test_browser import CHROMIUM, FLAGS

pytestmark = pytest.mark.slow
TOKEN = "schedules-browser-token-0123456789"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A dashboard on a fresh SQLite database; yields (base URL, browser, login state)."""
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("schedules")
    url = f"sqlite:///{folder / 'cj.db'}"
    env = cli_env(url, CRONJOBS_DASHBOARD_TOKEN=TOKEN)
    engine = make_engine(url)
    upgrade(engine)  # here, not a `cronjobs migrate` process: this file's time is short
    engine.dispose()
    dashboard = Dashboard(env, folder).wait_ready()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            context = browser.new_context()
            page = context.new_page()
            page.goto(dashboard.url + "/login")
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button")
            page.wait_for_url(dashboard.url + "/")
            state = context.storage_state()
            context.close()
            yield dashboard.url, browser, state
            browser.close()
    finally:
        assert dashboard.stop() == 0


def on_screen(page, selector: str, width: int) -> None:
    box = page.locator(selector).first.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box)


def test_add_pause_remove_a_schedule_at_1280_and_390_px(served):
    base, browser, state = served
    context = browser.new_context(viewport={"width": 1280, "height": 844},
                                  storage_state=state)
    page = context.new_page()
    try:
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 844})
            add_pause_remove(page, base, width)
    finally:
        context.close()


def add_pause_remove(page, base: str, width: int) -> None:
    """Through the page's forms: add entry `w<width>` of task test-count, see it listed
    and on the Tasks page, pause it, remove it; buttons on screen, no sideways scroll."""
    name, task = f"w{width}", f"test-count:w{width}"
    row = f"#schedules tr[data-task='{task}']"
    page.goto(base + "/tasks")
    page.click("#schedules-link")  # the Tasks page links to the Schedules page
    page.wait_for_url(base + "/schedules")
    page.select_option("#add-schedule select[name=task]", "test-count")
    page.fill("#add-schedule input[name=name]", name)
    page.fill("#add-schedule input[name=cron]", "0 9 * * *")
    page.fill("#add-schedule input[name=timezone]", "Europe/Istanbul")
    page.fill("#add-schedule input[name=payload]", '{"market": "tr"}')
    on_screen(page, "#add-schedule button.add", width)
    page.click("#add-schedule button.add")
    page.wait_for_url(base + "/schedules")
    assert page.locator(row).count() == 1
    assert page.locator(row).get_attribute("data-source") == "database"
    on_screen(page, f"{row} button.pause", width)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.goto(base + "/tasks")  # a task at once, before any tick
    assert page.locator(f"#tasks tr[data-task='{task}']").count() == 1
    page.goto(base + "/schedules")
    page.click(f"{row} button.pause")
    page.wait_for_url(base + "/schedules")
    assert page.locator(row).get_attribute("data-paused") == "1"
    on_screen(page, f"{row} button.remove", width)
    page.click(f"{row} button.remove")
    page.wait_for_url(base + "/schedules")
    assert page.locator(row).count() == 0
