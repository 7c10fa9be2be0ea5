"""Retry all 5,000 failed rows in Chromium against a real `cronjobs serve` on MariaDB: the
click (a form POST with its CSRF token) opens a confirmation page, whose button opens the
operation's page, which refreshes with the progress until it shows done; a second click on
the same rows (from the Failed page or the Queue page's "all matching") and `cronjobs failed
--retry` meanwhile are refused naming the operation; a POST without the CSRF token changes
nothing."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import cli_env, run_cli
from cronjobs.store.models import cronjob_operation
from cronjobs.store.models import cronjob_queue as q
from test_browser import CHROMIUM, FLAGS, TOKEN, Serve, utcnow

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["mariadb"], indirect=True)]
KIND = "test.summary.execute"
ROWS = 5000


def add_failed(engine: sa.Engine) -> list[int]:
    """5,000 failed rows on a queue no worker of `serve` consumes (they stay pending)."""
    now = utcnow()
    row = {"type": KIND, "queue": "parked", "status": "failed", "priority": 5, "payload": "{}",
           "attempts": 3, "max_attempts": 3, "error": "HTTP 503 from upstream",
           "process_logs": "[old] attempt 3/3 failed\n", "created_at": now, "updated_at": now,
           "finished_at": now}
    with engine.begin() as conn:
        conn.execute(q.insert(), [row] * ROWS)
        return [r[0] for r in conn.execute(sa.select(q.c.id).order_by(q.c.id))]


def test_retry_all_click_progress_done_in_a_browser(db_url, tmp_path):
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("CRONJOBS_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    env = cli_env(db_url, CRONJOBS_DASHBOARD_TOKEN=TOKEN)
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    ids = add_failed(engine)
    # Another transaction holds a row of the third batch: the operation waits there with
    # 1,000 of 5,000 done until the test lets it go on.
    blocker = engine.connect()
    hold = blocker.begin()
    blocker.execute(sa.select(q.c.id).where(q.c.id == ids[1200]).with_for_update()).all()
    serve = Serve(env, tmp_path)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": 1360, "height": 860})
            page = browser.new_page()
            base = serve.url
            page.goto(base + "/")
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button")
            page.wait_for_url(base + "/")

            page.goto(f"{base}/failed?type={KIND}")
            button = page.locator("#retry-every button.retry-every")
            assert button.inner_text() == f"Retry all 5,000 failed rows of {KIND}"
            button.click()
            page.wait_for_url(f"{base}/operations/confirm")  # the confirmation page first
            assert page.locator("#count").inner_text().startswith("5,000 row(s)")
            assert page.locator("#selection").inner_text() == f"failed type={KIND}"
            assert page.locator("#confirm").inner_text() == "Retry 5,000 row(s)"
            began = time.perf_counter()
            page.click("#confirm")
            page.wait_for_url(re.compile(r".*/operations/\d+$"))
            opened = time.perf_counter() - began
            op_id = int(page.url.rsplit("/", 1)[1])
            page.wait_for_selector("#progress-text:has-text('1,000 of 5,000 done')", timeout=30_000)
            assert page.locator("h1 .st-running").count() == 1
            assert page.locator("meta[http-equiv=refresh]").count() == 1
            assert page.locator("progress").get_attribute("value") == "1000"
            page.screenshot(path=str(shots / "operation-running.png"), full_page=True)

            # a second click while it runs: refused, naming the operation and its progress,
            # from the Failed page and from the Queue page's "all matching" (the same rows)
            refusal = (f"A retry of this selection is already running (operation {op_id}, "
                       "1,000 of 5,000 done).")
            page.goto(f"{base}/failed?type={KIND}")
            assert f"#{op_id}" in page.locator("#operations").inner_text()
            page.locator("#retry-every button.retry-every").click()
            page.wait_for_load_state()
            assert page.locator("#refused").inner_text().startswith(refusal)
            page.goto(f"{base}/queue?status=failed&type={KIND}")
            with page.expect_response(f"{base}/operations/confirm") as answer:
                page.locator("#bulk-all button.bulk-all-retry").click()
            assert answer.value.status == 409
            assert page.locator("#refused").inner_text().startswith(refusal)
            # the same selection from the command line: refused too
            cli = run_cli(["failed", "--retry", "--type", KIND], env, cwd=tmp_path)
            assert cli.returncode == 2 and f"(operation {op_id}, 1,000 of 5,000 done" in cli.stderr
            # a POST without the form's CSRF token (a forged request) is refused
            for path in ("/failed/retry", "/operations", "/operations/confirm"):
                forged = page.request.post(base + path, form={
                    "all": "1", "type": KIND, "action": "retry", "scope": "all",
                    "source": "failed"})
                assert forged.status == 403, path

            hold.rollback()  # let it go on; the page refreshes by itself until it is done
            page.goto(f"{base}/operations/{op_id}")
            page.wait_for_selector("h1 .st-done", timeout=60_000)
            assert page.locator("#progress-text").inner_text() == "5,000 of 5,000 done"
            assert page.locator("#changed").inner_text() == "5,000"
            assert page.locator("meta[http-equiv=refresh]").count() == 0
            page.screenshot(path=str(shots / "operation-done.png"), full_page=True)
            browser.close()
    finally:
        if hold.is_active:
            hold.rollback()
        blocker.close()
        code = serve.stop()
    assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]
    assert opened < 2, opened  # click to progress page in the browser (0.2 s measured)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_operation)).scalar() == 1
        rows = conn.execute(sa.select(q.c.status, q.c.attempts, q.c.process_logs)
                            .where(q.c.type == KIND)).all()
    engine.dispose()
    line = f"retried by dashboard (operation {op_id})"
    assert all(r.status == "pending" and r.attempts == 0 for r in rows)
    assert [r.process_logs.count(line) for r in rows] == [1] * ROWS
