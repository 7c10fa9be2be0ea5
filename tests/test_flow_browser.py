"""Flow control in Chromium against a real `cronjobs serve` on MariaDB: pause the default
queue from the Pauses & blocks page (a confirmation page first), and the worker holds its
rows (attempts unchanged) while it runs rows of another queue, and a scheduled task whose
run waits there shows its next slot as skipped on the Tasks page; resume, and they run. A
blocked key is listed with its reason, holds its row while another key's row runs, and
Unblock lets it run. A task is paused for 2 h from the form. Every action is a POST that
needs the CSRF token (403 without)."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import cli_env, run_cli
from cronjobs import store
from cronjobs.store.models import cronjob_queue as q
from test_browser import CHROMIUM, FLAGS, TOKEN, Serve, utcnow

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["mariadb"], indirect=True)]
KIND = "test.summary.execute"


def add(engine: sa.Engine, n: int = 1, **values) -> list[int]:
    now = utcnow()
    row = {"type": KIND, "queue": "default", "status": "pending", "priority": 5,
           "payload": json.dumps({"text": "flow"}), "attempts": 0, "max_attempts": 1,
           "created_at": now, "updated_at": now, **values}
    with engine.begin() as conn:
        return [conn.execute(q.insert().values(**row)).inserted_primary_key[0] for _ in range(n)]


def rows(engine: sa.Engine, ids: list[int]) -> list[dict]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(q.c.id, q.c.status, q.c.attempts)
                                              .where(q.c.id.in_(ids)).order_by(q.c.id)).mappings()]


def wait_done(engine: sa.Engine, ids: list[int], timeout: float = 60) -> None:
    """Until every row of `ids` is completed (their final state)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(r["status"] == "completed" for r in rows(engine, ids)):
            return
        time.sleep(0.2)
    raise AssertionError(rows(engine, ids))


def confirm(page, base: str, button: str) -> None:
    """Click `button`, check the confirmation page, confirm, land on the Pauses page."""
    page.click(button)
    page.wait_for_url(base + "/flow/confirm")
    page.click("#confirm")
    page.wait_for_url(base + "/flow")


def test_pause_resume_unblock_and_a_skipped_slot_in_a_browser(db_url, tmp_path):
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("CRONJOBS_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    env = cli_env(db_url, CRONJOBS_DASHBOARD_TOKEN=TOKEN, CRONJOBS_LOG_LEVEL="WARNING")
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
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

            # -- pause the default queue: its rows wait while another queue's row runs
            page.click("header nav a:text-is('Pauses')")
            page.wait_for_url(base + "/flow")
            page.select_option("#pause-scope", "queue")
            page.fill("#pause-name", "default")
            page.fill("#pause-reason", "incident 42")
            page.click("#pause-button")
            page.wait_for_url(base + "/flow/confirm")
            assert "Pause queue default until resumed" in page.locator("#what").inner_text()
            page.click("#confirm")
            page.wait_for_url(base + "/flow")
            paused = page.locator("#pauses tr[data-name='default']")
            assert "incident 42" in paused.inner_text() and "dashboard@" in paused.inner_text()
            held = add(engine, 5)
            control = add(engine, queue="maintenance")
            wait_done(engine, control)  # the worker swept and ran what it may run
            time.sleep(1.0)  # one more sweep: still nothing of the paused queue
            assert [(r["status"], r["attempts"]) for r in rows(engine, held)] == \
                [("pending", 0)] * 5
            page.reload()
            # our 5 rows, one line; a minute task the serve's scheduler started meanwhile
            # (http-uptime, queue default) is held too, on a line of its own
            ours = page.locator("#held tr[data-reason='paused']", has_text=KIND)
            assert ours.count() == 1 and ours.locator("td").nth(3).inner_text() == "5"
            page.screenshot(path=str(shots / "flow-paused.png"), full_page=True)
            # http-uptime (OVERLAP skip, default queue): its slot's run waits in the paused
            # queue, so the next slot starts nothing and is recorded, and the page says so
            for minutes in (2, 3):
                at = (utcnow() + timedelta(minutes=minutes)).isoformat()
                # (a URL: outside serve, the uptime task has work only with one; never
                # fetched, as the slot starts nothing)
                ticked = run_cli(["tick", "--now", at],
                                 {**env, "CRONJOBS_UPTIME_URLS": "http://127.0.0.1:9/"},
                                 cwd=tmp_path)
                assert ticked.returncode == 0, ticked.stdout + ticked.stderr
            assert "skipped http-uptime: running" in ticked.stdout, ticked.stdout
            page.goto(base + "/tasks")
            task = page.locator("tr[data-task='http-uptime']")
            assert "paused (queue default)" in task.locator("td.name").inner_text()
            assert ", running" in task.locator("td.skipped").inner_text()
            assert "overlap: skip" in task.locator("td.flow").inner_text()
            page.screenshot(path=str(shots / "flow-tasks.png"), full_page=True)
            page.goto(base + "/flow")
            resumed_at = utcnow()
            confirm(page, base, "#pauses tr[data-name='default'] button.resume")
            assert page.locator("#pauses tr[data-name='default']").count() == 0
            wait_done(engine, held)
            with engine.connect() as conn:
                starts = conn.execute(sa.select(q.c.started_at).where(q.c.id.in_(held))).scalars()
                assert all(s >= resumed_at - timedelta(seconds=1) for s in starts)

            # -- a blocked key: listed with its reason; another key runs; Unblock lifts it
            with engine.begin() as conn:
                now = utcnow()
                store.flow.block(conn, KIND, "4711", now=now, until=now + timedelta(hours=1),
                                 reason="FloodWait 3600 s")
            blocked = add(engine, limit_key="4711")
            free = add(engine, limit_key="4712")
            wait_done(engine, free)
            time.sleep(1.0)
            assert rows(engine, blocked)[0]["status"] == "pending"
            page.reload()
            row = page.locator("#blocks tr[data-key='4711']")
            assert "FloodWait 3600 s" in row.inner_text() and KIND in row.inner_text()
            assert "4712" not in page.locator("#blocks").inner_text()
            page.screenshot(path=str(shots / "flow-blocked.png"), full_page=True)
            confirm(page, base, "#blocks tr[data-key='4711'] button.unblock")
            assert page.locator("#blocks tr[data-key='4711']").count() == 0
            wait_done(engine, blocked)

            # -- pause a task from the form: listed with its scope
            page.select_option("#pause-scope", "task")
            page.fill("#pause-name", "test-count")
            page.fill("#pause-for", "2h")
            page.click("#pause-button")
            page.wait_for_url(base + "/flow/confirm")
            assert "Pause task test-count for 2h" in page.locator("#what").inner_text()
            page.click("#confirm")
            page.wait_for_url(base + "/flow")
            pause_row = "#pauses tr[data-scope='task'][data-name='test-count']"
            assert page.locator(pause_row).count() == 1

            # -- every action needs the CSRF token
            for path in ("/flow/confirm", "/flow/pause", "/flow/resume", "/flow/unblock"):
                forged = page.request.post(base + path, form={
                    "action": "pause", "scope": "queue", "name": "default", "block": "1"})
                assert forged.status == 403, path
            with engine.connect() as conn:
                assert [p["name"] for p in store.flow.list_pauses(conn, utcnow())] == \
                    ["test-count"]
            browser.close()
    finally:
        code = serve.stop()
        engine.dispose()
    assert code == 0
