"""The dashboard in a real browser: Debian's Chromium driven by the
`playwright` package against a real `cronjobs serve` on MariaDB. Log in; see the tasks;
switch a task off and see the scheduler skip it; Run now on the uptime task, land on its
row, watch it complete, open the Results tab; a double click on Run now makes one row;
retry a failed row and a whole failed group; cancel a pending row; XSS payloads stay text
(no dialog ever opens); a raising render_summary shows its error box; switch to Turkish.
Each page is saved as a screenshot (to $CRONJOBS_SCREENSHOTS/fixtures, else the test's tmp
dir); the screenshots of the README and docs/dashboard.md come from a demo without fixtures
(tests/test_readme_screenshots.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import cli_env, run_cli
from cronjobs.store.models import cronjob_queue

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["mariadb"], indirect=True)]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "browser-test-token-0123456789"
XSS = '<script>alert(1)</script> "><img src=x onerror=alert(1)> "onmouseover=alert(1) x="'
TEXT = "🚀 صف کارها"


def utcnow() -> datetime:
    from cronjobs.clock import utcnow as now

    return now()


class Serve:
    """`cronjobs serve --port PORT` (default 0: any free port) as a real process; `url` once
    it prints its line."""

    def __init__(self, env: dict, cwd: Path, port: int = 0) -> None:
        self.log = open(cwd / "serve.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "serve", "--port",
                                      str(port), "--threads", "2"], env=env, cwd=cwd, text=True,
                                     stdout=subprocess.PIPE, stderr=self.log)
        self.lines: list[str] = []
        self.url = None
        ready = threading.Event()

        def pump() -> None:
            for line in self.proc.stdout:
                self.lines.append(line)
                if m := re.search(r"dashboard at (http://127\.0\.0\.1:\d+)/", line):
                    self.url = m[1]
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        assert ready.wait(90) and self.url, "".join(self.lines) + (cwd / "serve.log").read_text()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
            self.log.close()


def insert(engine: sa.Engine, **values) -> int:
    now = utcnow()
    row = {"type": "test.summary.execute", "queue": "default", "status": "failed",
           "priority": 5, "payload": "{}", "attempts": 1, "max_attempts": 1, "created_at": now,
           "updated_at": now, "finished_at": now, **values}
    with engine.begin() as conn:
        return conn.execute(cronjob_queue.insert().values(**row)).inserted_primary_key[0]


def get(engine: sa.Engine, job_id: int) -> dict:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(cronjob_queue).where(cronjob_queue.c.id == job_id))
                    .mappings().one())


def test_the_dashboard_in_a_browser(db_url, tmp_path):
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("CRONJOBS_SCREENSHOTS") or tmp_path / "screenshots") / "fixtures"
    shots.mkdir(parents=True, exist_ok=True)
    env = cli_env(db_url, CRONJOBS_DASHBOARD_TOKEN=TOKEN, CRONJOBS_LOG_LEVEL="WARNING")
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    serve = Serve(env, tmp_path)
    dialogs: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": 1360, "height": 860})
            page = browser.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            base = serve.url

            def shot(name: str) -> None:
                page.screenshot(path=str(shots / f"{name}.png"), full_page=True)

            # -- log in; see the tasks
            page.goto(base + "/")
            assert page.locator("input[name=token]").is_visible()
            shot("login")
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button")
            page.wait_for_url(base + "/")
            assert page.locator("h1").inner_text() == "Overview"
            page.click("header nav a:text-is('Tasks')")
            page.wait_for_url(base + "/tasks")
            assert page.locator("h1").inner_text() == "Tasks"
            for task in ("http-uptime", "test-count", "cronjobs-health", "test-gone"):
                assert page.locator(f"tr[data-task='{task}']").count() == 1
            assert "module not installed" in page.locator("tr[data-task='test-gone']").inner_text()
            shot("tasks")

            # -- switch a task off; the scheduler skips it
            page.click("tr[data-task='test-count'] button.switch")
            page.wait_for_load_state()
            assert page.locator("tr[data-task='test-count'] button.switch").inner_text() == "Off"
            ticked = run_cli(["tick", "--now", (utcnow() + timedelta(minutes=2)).isoformat()],
                             env, cwd=tmp_path)
            assert "skipped test-count: disabled" in ticked.stdout, ticked.stdout + ticked.stderr
            # serve's scheduler starts http-uptime's slots (this tick does not: outside
            # serve, with no URL, the task is idle): until a run's family has finished, Run
            # now would ask first (OVERLAP skip); wait for it to end
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                with engine.connect() as conn:
                    going = conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)
                                         .where(cronjob_queue.c.type.like("http.uptime.%"),
                                                cronjob_queue.c.status.in_(("pending", "running")))
                                         ).scalar()
                if not going:
                    break
                time.sleep(0.2)

            # -- Run now on the uptime task: its row page, completed, Results tab
            page.click("tr[data-task='http-uptime'] button.run-now")
            page.wait_for_url(re.compile(r".*/jobs/\d+$"))
            job_id = int(page.url.rsplit("/", 1)[1])
            row = get(engine, job_id)
            assert (row["type"], row["priority"]) == ("http.uptime.discover", 1)
            page.wait_for_selector("h1 .st-completed", timeout=90_000)  # the page refreshes
            child = page.locator("#children a[href^='/jobs/']").first
            child.click()
            page.wait_for_selector("h1 .st-completed", timeout=90_000)
            shot("job")
            page.click("#results-tab")
            page.wait_for_selector("#results table.summary")
            summary = page.locator("#results").inner_text()
            assert "200" in summary and "/health" in summary
            shot("results")

            # -- a double click on Run now makes one row
            def manual_rows() -> int:
                with engine.connect() as conn:
                    return conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue).where(
                        cronjob_queue.c.idempotency_key.like("cronjobs:http-uptime:manual:%"))).scalar()

            before = manual_rows()
            page.goto(base + "/tasks")
            page.dblclick("tr[data-task='http-uptime'] button.run-now")
            page.wait_for_url(re.compile(r".*/jobs/\d+$"))
            time.sleep(1.0)  # a second POST of the double click would have arrived by now
            assert manual_rows() == before + 1
            page.goto(base + "/tasks")
            page.click("tr[data-task='http-uptime'] button.run-now")  # a deliberate click
            page.wait_for_url(re.compile(r".*/jobs/\d+$"))
            assert manual_rows() == before + 2

            # -- failed rows: retry one, retry a whole group
            group = [insert(engine, error="HTTP 503 from upstream", payload=json.dumps({"n": i}),
                            scheduled_at=utcnow() + timedelta(days=1)) for i in range(3)]
            lone = insert(engine, error="ValueError: bad input", type="test.shape.execute",
                          payload='{"shape": "true"}')
            page.goto(base + "/failed")
            shot("failed")
            page.locator("tr[data-type='test.shape.execute'] button.retry-one").click()
            page.wait_for_load_state()
            assert "retried by dashboard" in get(engine, lone)["process_logs"]
            page.goto(base + "/failed")
            page.locator("tr:has-text('HTTP 503 from upstream') button.retry-all").click()
            page.wait_for_url(base + "/operations/confirm")  # what it does, to how many rows
            assert page.locator("#count").inner_text().startswith("3 row(s)")
            page.click("#confirm")
            page.wait_for_url(re.compile(r".*/operations/\d+$"))  # a bulk operation's page
            page.wait_for_selector("h1 .st-done", timeout=60_000)  # it refreshes until done
            assert page.locator("#progress-text").inner_text() == "3 of 3 done"
            for job in group:  # back to pending, due now (a worker may have run it since)
                assert "retried by dashboard" in get(engine, job)["process_logs"]
                assert get(engine, job)["status"] != "failed"

            # -- cancel a pending row (due tomorrow, so no worker takes it first)
            pending = insert(engine, status="pending", attempts=0, finished_at=None,
                             scheduled_at=utcnow() + timedelta(days=1), title="cancel me")
            page.goto(f"{base}/jobs/{pending}")
            page.click("button.cancel")
            page.wait_for_selector("h1 .st-cancelled")
            assert get(engine, pending)["status"] == "cancelled"

            # -- a row dispatched without max attempts shows its handler's (— when unknown)
            later = utcnow() + timedelta(days=1)  # no worker takes them first
            unset = {i: insert(engine, type=kind, status="pending", attempts=0, finished_at=None,
                               max_attempts=None, scheduled_at=later, title=f"unset {i}")
                     for i, kind in (("known", "test.shape.execute"),
                                     ("remote", "billing.invoice.execute"))}
            for key, shown in (("known", "0/3"), ("remote", "0/—")):
                page.goto(f"{base}/jobs/{unset[key]}")
                cell = page.locator("table.kv tr", has_text="Attempts").locator("td")
                assert cell.inner_text() == shown, key
            page.goto(base + "/queue?title=unset")
            assert page.locator(f"#rows tr:has(a[href='/jobs/{unset['remote']}'])").locator(
                "td.attempts").inner_text() == "0/—"

            # -- values from outside stay text; a raising render_summary shows its error box
            nasty = insert(engine, title=(XSS + " " + TEXT)[:255], error=XSS,
                           process_logs=XSS + "\n",
                           payload=json.dumps({"x": XSS, "t": TEXT}),
                           result_payload=json.dumps({"mode": "str", "text": XSS}))
            broken = insert(engine, status="completed", result_payload='{"mode": "raise"}',
                            payload='{"kept": "yes"}')
            for path in ("/queue", "/queue?status=failed", f"/jobs/{nasty}",
                         f"/jobs/{nasty}?tab=results", "/failed", f"/queue?title={TEXT}"):
                page.goto(base + path)
                page.wait_for_load_state("load")
                assert page.locator("img").count() == 0, path
            page.goto(f"{base}/jobs/{nasty}")
            assert json.dumps(XSS) in page.locator("#payload").inner_text()  # shown as text
            assert XSS in page.locator("#error").inner_text()
            assert TEXT in page.locator(".subtitle").inner_text()
            shot("job-xss")
            page.goto(f"{base}/jobs/{broken}?tab=results")
            assert "ValueError" in page.locator("#results .error-box").inner_text()
            assert page.locator("#payload").count() == 0  # the Results tab shows results only
            page.click("#overview-tab")
            assert "yes" in page.locator("#payload").inner_text()

            page.goto(base + "/queue")
            shot("queue")
            page.goto(base + "/workers")
            assert page.locator("#workers tr").count() >= 2
            shot("workers")

            # -- Turkish
            page.goto(base + "/tasks")
            page.click("a[lang=tr]")
            page.wait_for_load_state()
            assert page.locator("h1").inner_text() == "Görevler"
            run_now = page.locator("tr[data-task='http-uptime'] button.run-now")
            assert run_now.inner_text() == "Şimdi çalıştır"
            shot("tasks-tr")
            browser.close()
        assert dialogs == []
    finally:
        code = serve.stop()
        engine.dispose()
    assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]
