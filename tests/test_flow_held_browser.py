"""A backlog says why it waits, in Chromium against a real `cronjobs serve` on MariaDB and
Redis: 30 rows of a 5/s type dispatched at once, and while they drain the Pauses & blocks
page lists them as rate-limited with the limit and the count, the Overview's due figure
splits into rate-limited rows and rows waiting for a slot, and the last row's Job page
says it waits for the rate limit (the next start, the rows ahead). Once drained nothing
is held. At 1280 px and, with a second batch, at 390 px (no page wider than the phone)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import REDIS, SAMPLE_HANDLERS, cli_env
from cronjobs import queue
from cronjobs.store.models import cronjob_queue as q
from test_browser import CHROMIUM, FLAGS, TOKEN, Serve

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["mariadb"], indirect=True)]
HELD_HANDLERS = str(Path(__file__).parent / "held_handlers")
RATED = "held.ratefive.execute"  # RATE_LIMIT = "5/s", queue "rated"
LIMIT = "5/s on held.ratefive.execute"


def drained(engine: sa.Engine, ids: list[int], timeout: float = 90) -> list:
    """The start times of rows `ids` once every one completed (they drain at 5/s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(q.c.status, q.c.started_at)
                                .where(q.c.id.in_(ids))).all()
        if all(status == "completed" for status, _ in rows):
            return sorted(started for _, started in rows)
        time.sleep(0.3)
    raise AssertionError(f"not drained: {sorted(s for s, _ in rows)}")


def fits(page, what: str) -> None:
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], (what, width)


def shows_the_backlog(page, base: str, ids: list[int], shots: Path, size: str) -> float:
    """The three pages, right after the rows were dispatched (they drain in ~6 s);
    returns when (monotonic) the Overview was read."""
    page.goto(base + "/flow")
    held = page.locator("#held tr[data-reason='rate_limited']", has_text=RATED)
    assert held.count() == 1, page.locator("#held").inner_text()
    assert held.locator("td.why").inner_text() == "rate-limited (5/s)"  # the type's own
    assert 0 < int(held.locator("td.rows").inner_text()) <= len(ids)
    page.screenshot(path=str(shots / f"held-flow-{size}.png"), full_page=True)
    fits(page, "/flow")

    page.goto(base + "/")
    seen = time.monotonic()
    why = page.locator("tr[data-held='rated'] td.why").inner_text()
    found = re.fullmatch(rf"(\d+) due: (\d+) rate-limited \({re.escape(LIMIT)}\)"
                         rf"(, (\d+) waiting for a slot)?", why.strip())
    assert found, why
    due, limited, free = int(found[1]), int(found[2]), int(found[4] or 0)
    assert 0 < limited <= due <= len(ids) and limited + free == due
    page.screenshot(path=str(shots / f"held-overview-{size}.png"), full_page=True)
    fits(page, "/")

    page.goto(base + f"/jobs/{ids[-1]}")
    assert page.locator("#waits-for").count() == 1, page.locator("section.facts").inner_text()
    said = page.locator("#waits-for").inner_text()
    assert re.fullmatch(r"the rate limit 5/s of held\.ratefive\.execute"
                        r"(, next start in ~\d+\.\d s)?, \d+ due rows ahead", said), said
    page.screenshot(path=str(shots / f"held-job-{size}.png"), full_page=True)
    fits(page, "/jobs/ID")
    return seen


def test_a_rate_limited_backlog_says_why_it_waits(make_app, db_url, namespace, tmp_path):
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("CRONJOBS_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    paths = f"{SAMPLE_HANDLERS}{os.pathsep}{HELD_HANDLERS}"
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_DASHBOARD_TOKEN=TOKEN,
                  CRONJOBS_HANDLER_PATHS=paths, CRONJOBS_LOG_LEVEL="WARNING")
    make_app(broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, HELD_HANDLERS))  # dispatches
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    serve = Serve(env, tmp_path)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            wide = browser.new_context(viewport={"width": 1280, "height": 860})
            page = wide.new_page()
            base = serve.url
            page.goto(base + "/login?next=/flow")  # not the Overview: its numbers keep 3 s
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button")
            page.wait_for_url(base + "/flow")
            phone = browser.new_context(viewport={"width": 390, "height": 844},
                                        storage_state=wide.storage_state())
            page.close()
            snapshot = 0.0  # when the Overview's numbers (kept 3 s) were last made
            for context, size in ((wide, "1280"), (phone, "390")):
                time.sleep(max(0.0, snapshot + 3.1 - time.monotonic()))
                view = context.new_page()  # closed after its round: an Overview left open
                # polls, and would keep its snapshot fresh
                ids = queue.dispatch_many([{"type": RATED, "payload": {"n": i}}
                                           for i in range(30)])
                seen = shows_the_backlog(view, base, ids, shots, size)
                starts = drained(engine, ids)
                assert (starts[-1] - starts[0]).total_seconds() >= 4.5  # 30 at 5/s
                time.sleep(max(0.0, seen + 3.1 - time.monotonic()))  # Overview: 3 s snapshot
                view.goto(base + "/flow")
                assert view.locator("#held tr[data-reason='rate_limited']").count() == 0
                view.goto(base + "/")
                snapshot = time.monotonic()
                assert view.locator("tr[data-held='rated']").count() == 0
                view.close()
            browser.close()
    finally:
        code = serve.stop()
        engine.dispose()
    assert code == 0
