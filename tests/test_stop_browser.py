"""Stop in a real browser (Chromium driven by Playwright, a `cronjobs dashboard` and a
1-slot `cronjobs worker` on MariaDB + Redis): the Workers page shows the running job with
its worker, slot and elapsed time and the worker's busy slots; Stop (a confirmation, then a
POST with the CSRF token) ends a `sleep(600)` job within a few seconds with its outcome
recorded, and the slot runs the next row; a POST without the token, and a Stop of a row that
no longer runs, are refused and change nothing."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from conftest import REDIS, SAMPLE_HANDLERS, cli_env
from cronjobs import queue
from cronjobs.store.models import cronjob_stop
from dashboard_process import Dashboard
from test_browser import CHROMIUM, FLAGS
from test_stop_running_jobs import LONG, STOP_HANDLERS, STOP_WITHIN_SECONDS
from test_worker_e2e import RECORD, wait_for, worker

pytestmark = [pytest.mark.parametrize("backend", ["mariadb"], indirect=True),
              pytest.mark.slow]
TOKEN = "stop-browser-token-0123456789"
WAIT_MS = 30_000


def _status(app, job_id: int) -> str:
    return queue.get(job_id, ["status"], app=app)["status"]


def _requests(app) -> int:
    with app.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(cronjob_stop)).scalar_one()


def test_stop_ends_a_sleeping_job_and_its_slot_runs_the_next_row(make_app, db_url, namespace,
                                                                 tmp_path):
    from playwright.sync_api import sync_playwright

    paths = f"{SAMPLE_HANDLERS}:{STOP_HANDLERS}"
    app = make_app(broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, STOP_HANDLERS))
    dashboard = Dashboard(cli_env(db_url, namespace, CRONJOBS_DASHBOARD_TOKEN=TOKEN,
                                  CRONJOBS_HANDLER_PATHS=paths), tmp_path).wait_ready()
    try:
        with worker(db_url, namespace, tmp_path / "worker.log", threads=1,
                    CRONJOBS_HANDLER_PATHS=paths, CRONJOBS_LOG_LEVEL="INFO") as proc, \
                sync_playwright() as pw:
            job_id = queue.dispatch(LONG, {"seconds": 600}, title="nightly export", app=app)
            wait_for(lambda: _status(app, job_id) == "running", 90, "the job running", proc)
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            try:
                page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
                _login(page, dashboard.url)
                _stop_through_the_page(page, dashboard.url, app, job_id, proc)
            finally:
                browser.close()
            other = queue.dispatch(RECORD, {"tag": "next"}, app=app)
            wait_for(lambda: _status(app, other) == "completed", 60, "the next row", proc)
    finally:
        assert dashboard.stop() == 0


def _login(page, base: str) -> None:
    page.goto(base + "/login?next=/workers")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button")
    page.wait_for_url(base + "/workers")


def _stop_through_the_page(page, base: str, app, job_id: int, proc) -> None:
    row = page.locator(f"#running tr[data-id='{job_id}']")
    row.wait_for(timeout=WAIT_MS)
    assert "nightly export" in row.inner_text()
    # the heartbeat names the slot within a second or two; the page polls every 2 s
    page.wait_for_function(
        f"() => document.querySelector(\"#running tr[data-id='{job_id}'] .slot\")"
        ".textContent.trim() === '1'", timeout=WAIT_MS)
    assert page.locator("#workers td.busy").first.inner_text().strip() == "1 of 1"
    assert row.locator(".elapsed").inner_text().strip()
    assert "as of" in page.locator("#as-of").inner_text()

    # A POST without the CSRF token is refused; nothing is written.
    refused = page.request.post(f"{base}/jobs/{job_id}/stop", form={}, max_redirects=0)
    assert refused.status in (400, 403) and _requests(app) == 0

    row.locator("a.stop").click()
    page.wait_for_url(f"{base}/jobs/{job_id}/stop")
    assert "nightly export" in page.locator("#facts").inner_text()
    asked = time.monotonic()
    page.click("#confirm")
    page.wait_for_url(f"{base}/jobs/{job_id}?stop=requested")
    wait_for(lambda: _status(app, job_id) == "failed", 15, "the stopped row", proc)
    took = time.monotonic() - asked
    assert took < STOP_WITHIN_SECONDS, took
    stored = queue.get(job_id, app=app)
    assert (stored["outcome_reason"], stored["error"]) == ("stopped",
                                                           "stopped by an operator (dashboard)")
    # the Job page follows the row to its end without a reload
    page.wait_for_selector("h1 .status.st-failed", timeout=WAIT_MS)
    assert "stopped" in page.locator("code.reason").inner_text()
    print(f"\nStop click to failed row: {took:.2f} s")

    # A second Stop of the row, now failed: 409, nothing changed.
    page.goto(f"{base}/jobs/{job_id}/stop")
    assert page.locator("#not-running").is_visible() and page.locator("#confirm").count() == 0
    token = page.evaluate("() => document.querySelector('form.logout input').value")
    again = page.request.post(f"{base}/jobs/{job_id}/stop", form={"csrf_token": token},
                              max_redirects=0)
    assert again.status == 409 and "only a running job can be stopped" in again.text()
    assert _requests(app) == 1 and _status(app, job_id) == "failed"
