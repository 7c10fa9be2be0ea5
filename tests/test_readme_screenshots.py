"""The screenshots of the README and docs/dashboard.md, taken from a realistic demo: `cronjobs
serve` with the built-in handlers and the tutorial's handler
(docs/examples/GreetExecute.py), no test fixtures, on a SQLite database that holds a day of
what the built-in tasks write (every minute an uptime check and recover-stale, the health
check every 5 minutes, a few greetings, an hour when the checked site answered 503). On top
of it, in Chromium: the uptime task runs on its own, Run now greets Ada (with a payload) and
fails without one (retried later), the Results tab of an uptime check; every page is
photographed (to $CRONJOBS_SCREENSHOTS, e.g. docs/img, else the test's tmp dir), and every
page in the pictures is checked for what it shows."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import ROOT, cli_env, run_cli
from cronjobs.clock import utcnow
from cronjobs.store.models import cronjob_queue as q
from test_browser import CHROMIUM, FLAGS, Serve

pytestmark = pytest.mark.slow
TOKEN = "demo-token-0123456789abcdef"
SHOT = {"width": 1280, "height": 800}


def history(url: str) -> list[dict]:
    """A day of rows as the built-in tasks and the tour's handler write them (ids given, so
    an uptime check can name its discover row as parent)."""
    now = utcnow().replace(second=0, microsecond=0)
    rows, start = [], now - timedelta(hours=24)

    def row(job_type: str, at, seconds: float, status: str = "completed", **values) -> int:
        done = at + timedelta(seconds=seconds)
        rows.append({"id": len(rows) + 1, "type": job_type, "queue": "default",
                     "status": status, "priority": 5, "payload": "{}", "attempts": 1,
                     "max_attempts": 3, "created_at": at, "updated_at": done, "started_at": at,
                     "finished_at": done, "worker_id": "demo-host:4242", "title": None,
                     "error": None, "result_payload": None, "parent_id": None, **values})
        return len(rows)

    for minute in range(24 * 60 - 2):
        at = start + timedelta(minutes=minute)
        outage = 14 * 60 <= minute < 14 * 60 + 25  # the checked site answered 503 for 25 min
        row("cronjobs.recoverstale.execute", at, 0.004, queue="maintenance")
        parent = row("http.uptime.discover", at, 0.012, title="http-uptime",
                     payload=json.dumps({"slot": at.strftime("%Y%m%d%H%M")}),
                     result_payload=json.dumps({"dispatched": 1, "urls": [url],
                                                "jobs": [len(rows) + 1]}))
        result = {"url": url, "status_code": 503 if outage else 200, "expect_status": None,
                  "latency_ms": 21.0 + minute % 13, "expect": None, "found": None,
                  "error": "HTTP 503" if outage else None}
        row("http.uptime.execute", at + timedelta(seconds=0.02), result["latency_ms"] / 1000,
            "failed" if outage else "completed", parent_id=parent, title=f"uptime {url}",
            max_attempts=1, error=result["error"], result_payload=json.dumps(result),
            payload=json.dumps({"url": url, "expect": None, "expect_status": None,
                                "timeout": 10}))
        if minute % 5 == 0:
            row("cronjobs.health.execute", at, 0.4, queue="maintenance")
        if minute % 97 == 0:
            name = ("Ada", "Grace", "Linus", "Margaret")[minute % 4]
            row("tour.greet.execute", at, 0.002, title="tour-greet (manual)",
                payload=json.dumps({"name": name, "manual": True}),
                result_payload=json.dumps({"greeting": f"Hello, {name}!"}))
    for minute in (130, 610):
        row("tour.greet.execute", start + timedelta(minutes=minute), 0.002, "failed",
            attempts=3, error="name must be non-empty text", title="tour-greet (manual)",
            payload=json.dumps({"name": "", "manual": True}))
    return rows


def wait_for(engine: sa.Engine, condition, timeout: float = 60.0) -> None:
    """Until a row matches `condition` (the real scheduler and worker write it)."""
    deadline = time.monotonic() + timeout
    with engine.connect() as conn:
        while not conn.execute(sa.select(q.c.id).where(condition).limit(1)).first():
            assert time.monotonic() < deadline, "no such row in time"
            time.sleep(0.2)
            conn.rollback()


@pytest.fixture
def demo(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    env = cli_env(url, CRONJOBS_DASHBOARD_TOKEN=TOKEN,
                  CRONJOBS_HANDLER_PATHS=str(ROOT / "docs" / "examples"))
    assert run_cli(["migrate"], env, cwd=tmp_path).returncode == 0
    with socket.socket() as free:  # the port the uptime history names, before serve starts
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(q.insert(), history(f"http://127.0.0.1:{port}/health"))
    serve = Serve(env, tmp_path, port)
    try:
        yield serve, engine
    finally:
        engine.dispose()
        assert serve.stop() == 0, (tmp_path / "serve.log").read_text()[-3000:]


def test_readme_screenshots_of_a_demo(demo, tmp_path):
    from playwright.sync_api import sync_playwright

    serve, engine = demo
    base = serve.url
    shots = Path(os.environ.get("CRONJOBS_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport=SHOT)

        def shot(name: str) -> None:
            page.screenshot(path=str(shots / f"{name}.png"))

        # the scheduler's first uptime check of the server's own /health, done for real
        wait_for(engine, (q.c.type == "http.uptime.execute") & (q.c.status == "completed")
                 & (q.c.worker_id != "demo-host:4242"))
        page.goto(base + "/")
        page.fill("input[name=token]", TOKEN)
        page.click("form.login button")
        page.wait_for_url(base + "/")
        assert page.locator("svg#chart-day rect.seg-failed").count() >= 1  # the 503 hour
        assert page.locator("#workers-live").inner_text() == "1"
        shot("overview")

        page.goto(base + "/tasks")
        assert page.locator("tr[data-task='tour-greet']").count() == 1
        assert page.locator("tr[data-task^='test-']").count() == 0  # no test fixtures
        shot("tasks")

        page.goto(base + "/tasks/tour-greet")
        page.fill("#payload", '{"name": "Ada"}')
        page.click("form.run-form button.run-now")
        page.wait_for_url(re.compile(r".*/jobs/\d+$"))
        page.wait_for_selector("h1 .st-completed", timeout=60_000)
        assert "Hello, Ada!" in page.locator("pre#result").inner_text()
        page.goto(base + "/tasks/tour-greet")
        page.fill("#payload", '{"name": ""}')  # an empty name: fails, retried in 2 min
        page.click("form.run-form button.run-now")
        page.wait_for_url(re.compile(r".*/jobs/\d+$"))
        page.wait_for_selector(".next-attempt", timeout=60_000)

        page.goto(base + "/tasks/http-uptime")
        assert page.locator("#runs tbody tr").count() == 50
        shot("task")

        page.goto(base + "/queue")
        assert page.locator("#rows .next-attempt").count() == 1  # the greeting without a name
        assert page.locator("#rows code:text-is('cronjobs.recoverstale.execute')").count() == 0
        shot("queue")

        page.goto(base + "/queue?task=http-uptime&status=completed")
        check = page.locator("#rows tr[data-status='completed'] td a").first
        check.click()
        page.click("#results-tab")
        page.wait_for_selector("#results table.summary")
        shot("results")

        page.goto(base + "/failed")
        assert "HTTP 503" in page.locator("#groups").inner_text()
        shot("failed")

        page.goto(base + "/tasks?lang=tr")
        assert page.locator("h1").inner_text() == "Görevler"
        shot("tasks-tr")

        phone = browser.new_page(viewport={"width": 390, "height": 844},
                                 storage_state=page.context.storage_state())
        phone.goto(base + "/?lang=en")
        assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        phone.screenshot(path=str(shots / "phone.png"))
        browser.close()
    sizes = {p.name: p.stat().st_size for p in shots.glob("*.png")}
    assert len(sizes) == 8 and max(sizes.values()) < 250_000, sizes
