"""The pages on a 390 px phone and a 1280 px screen (Chromium driven by Playwright, one
`cronjobs dashboard` process on SQLite): the charts' axis labels are at least 11 px as
drawn (not an SVG text scaled down with its drawing), a worker id is one line (a long host
name may wrap after a hyphen, never inside the pid), every Run now of the Tasks page and a
running job's Stop on the Workers page are on screen (and Run now runs its task), the Run
now box shows the handler's own example, a pending job that ran once before says
"No result yet." instead of an empty box, and the Failed page shows a group of errors
that differ in their ids as one block whose pattern and examples are not squeezed; a task
in its own zone (`[tasks.tour-greet] timezone`) shows its next run in that zone."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from conftest import ROOT, SAMPLE_HANDLERS, cli_env, run_cli
from cronjobs.clock import utcnow
from cronjobs.job import failures
from cronjobs.store.models import cronjob_queue as q
from cronjobs.store.models import cronjob_worker
from dashboard_process import Dashboard
from test_browser import CHROMIUM, FLAGS

pytestmark = pytest.mark.slow
TOKEN = "phone-browser-token-0123456789"
WORKER = "web-7.example.com:48213"  # a host name as socket.gethostname() gives, and a pid
LONG_WORKER = "a-worker-on-a-host-with-a-long-name:12345"
MIN_LABEL_PX = 11
GROUP_TYPE = "test.shape.execute"  # failed rows of one group on the Failed page
# the tour's task on a schedule in a zone of its own (not the settings' UTC), jittered
ZONED = ('[tasks.tour-greet]\nfrequency = "30 2 * * *"\ntimezone = "America/New_York"\n'
         'jitter = "5m"\n')
NEW_YORK = {datetime(2027, m, 1, tzinfo=UTC).astimezone(ZoneInfo("America/New_York")).tzname()
            for m in (1, 7)}  # EST, EDT


def insert(engine: sa.Engine, **values) -> int:
    now = utcnow()
    row = {"type": "test.count.discover", "queue": "default", "status": "pending",
           "priority": 5, "payload": "{}", "attempts": 0, "max_attempts": 3,
           "created_at": now, "updated_at": now, **values}
    with engine.begin() as conn:
        return conn.execute(q.insert().values(**row)).inserted_primary_key[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A dashboard on a database with an hour of finished runs, a running row, a live
    worker, a retried pending row and the last runs of a scheduler tick; yields
    (base URL, ids, browser, login state)."""
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("phone")
    url = f"sqlite:///{folder / 'cj.db'}"
    (folder / "cronjobs.toml").write_text(ZONED)
    env = cli_env(url, CRONJOBS_DASHBOARD_TOKEN=TOKEN, CRONJOBS_HANDLER_PATHS=os.pathsep.join(
        [SAMPLE_HANDLERS, str(ROOT / "docs" / "examples")]),
        CRONJOBS_CONFIG=str(folder / "cronjobs.toml"))
    assert run_cli(["migrate", "--quiet"], env, cwd=folder).returncode == 0
    assert run_cli(["tick"], env, cwd=folder).returncode == 0  # the Tasks' last runs
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    now = utcnow()
    for i in range(40):
        end = now - timedelta(minutes=i % 50, seconds=5)
        insert(engine, status="failed" if i % 9 == 0 else "completed", attempts=1,
               started_at=end - timedelta(seconds=2 + i % 4), finished_at=end, worker_id=WORKER)
    ids = {"running": insert(engine, status="running", attempts=1, started_at=now,
                             worker_id=WORKER, locked_until=now + timedelta(minutes=5)),
           "long": insert(engine, status="failed", attempts=3, started_at=now, finished_at=now,
                          worker_id=LONG_WORKER, error="boom"),
           "retried": insert(engine, type="tour.greet.execute", attempts=1, error="boom",
                             payload='{"name": "Ada"}', started_at=now - timedelta(minutes=1),
                             scheduled_at=now + timedelta(hours=1), worker_id=WORKER,
                             process_logs="attempt 1/3 on web-7.example.com:48213: failed\n")}
    for n in range(12):  # one group: half written with a fingerprint, half before 0013
        error = (f"requests.exceptions.HTTPError: 502 Server Error for url: https://api."
                 f"example.com/v2/accounts/{1000 + 37 * n}/messages?cursor=ab{n}cd9f{n}e")
        insert(engine, type=GROUP_TYPE, status="failed", attempts=3, finished_at=now,
               error=error, fingerprint=failures.fingerprint(error) if n % 2 else None)
    with engine.begin() as conn:
        conn.execute(cronjob_worker.insert().values(
            id=WORKER, host="web-7.example.com", pid=48213, queues="default,maintenance",
            status="running", started_at=now, last_seen_at=now + timedelta(hours=1),
            jobs_done=40, current_jobs=str(ids["running"])))
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
            yield dashboard.url, ids, browser, state
            browser.close()
    finally:
        assert dashboard.stop() == 0


def new_page(served, width: int):
    _base, _ids, browser, state = served
    return browser.new_context(viewport={"width": width, "height": 844}, storage_state=state)


LABEL_SIZES = """() => {
  const sizes = [];
  for (const el of document.querySelectorAll('.chart-area .axis')) {
    const box = el.getBoundingClientRect();
    sizes.push({text: el.textContent, px: parseFloat(getComputedStyle(el).fontSize),
                left: box.left, right: box.right, height: box.height});
  }
  for (const el of document.querySelectorAll('svg.chart text')) {  // drawn at the SVG's scale
    sizes.push({text: el.textContent, left: 0, right: 0, height: 99,
                px: parseFloat(getComputedStyle(el).fontSize) * el.getScreenCTM().a});
  }
  return sizes;
}"""


def chart_labels(page, width: int) -> list[dict]:
    """The axis labels of the page's charts, each checked: >= 11 px, drawn that tall, on
    screen."""
    labels = page.evaluate(LABEL_SIZES)
    for label in labels:
        assert label["px"] >= MIN_LABEL_PX, label
        assert label["height"] >= MIN_LABEL_PX, label  # not squeezed by its box
        assert label["left"] >= 0 and label["right"] <= width, label
    return labels


LINES = """(selector) => [...document.querySelectorAll(selector)].map(el => {
  const tops = new Set([...el.getClientRects()].map(r => Math.round(r.top)));
  const text = el.firstChild, pid = el.textContent.lastIndexOf(':');
  const range = document.createRange();  // the pid's digits alone
  range.setStart(text, pid + 1);
  range.setEnd(text, text.length);
  const pidTops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
  return {id: el.textContent, lines: tops.size, pidLines: pidTops.size};
})"""


@pytest.mark.parametrize("width", [390, 1280])
def test_chart_labels_worker_ids_and_run_now(served, width, tmp_path):
    base, ids, _browser, _state = served
    context = new_page(served, width)
    page = context.new_page()
    try:
        page.goto(base + "/")
        labels = chart_labels(page, width)
        texts = [label["text"] for label in labels]
        assert len(labels) >= 10 and "0" in texts, texts  # values and times of both charts
        page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
        page.goto(base + "/tasks/test-count")
        assert any(label["text"].endswith(" s") for label in chart_labels(page, width))

        for path in ("/", "/workers", f"/jobs/{ids['running']}", f"/jobs/{ids['long']}"):
            page.goto(base + path)
            shown = page.evaluate(LINES, ".worker-id")
            assert shown, path
            for worker in shown:
                assert worker["pidLines"] == 1, (path, worker)
                if worker["id"] == WORKER:
                    assert worker["lines"] == 1, (path, worker)
        page.goto(base + "/workers")
        for part in ("#running a.stop", "#running td.elapsed", "#running td.what"):
            box = page.locator(part).first.bounding_box()  # a running job's Stop on screen
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (part, box)
        page.screenshot(path=str(tmp_path / "workers.png"), full_page=True)

        for lang in ("en", "tr"):
            page.goto(f"{base}/tasks?lang={lang}")
            buttons = page.locator("#tasks button.run-now")
            assert buttons.count() >= 10
            for i in range(buttons.count()):
                box = buttons.nth(i).bounding_box()
                assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (lang, i, box)
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.screenshot(path=str(tmp_path / f"tasks-{lang}.png"), full_page=True)
        page.goto(base + "/tasks")
        page.click("tr[data-task='tour-greet'] button.run-now")
        page.wait_for_url(f"{base}/jobs/*")
        assert json.loads(page.locator("pre#payload").inner_text()) == {"manual": True}
    finally:
        context.close()


def test_run_now_box_and_a_pending_jobs_result(served):
    base, ids, _browser, _state = served
    context = new_page(served, 390)
    page = context.new_page()
    try:
        page.goto(base + "/tasks/tour-greet")
        assert page.locator("#payload").get_attribute("placeholder") == '{"name": "Ada"}'
        page.goto(base + "/tasks/test-count")
        assert page.locator("#payload").get_attribute("placeholder") == "{}"
        page.goto(f"{base}/jobs/{ids['retried']}")  # pending, after a failed attempt
        assert page.locator("#no-result").inner_text() == "No result yet."
        assert page.locator("pre#result").count() == 0 and page.locator("pre#log").is_visible()
        page.goto(f"{base}/jobs/{ids['retried']}?tab=results")
        assert page.locator("#no-result").inner_text() == "No result yet."
    finally:
        context.close()


GROUP_BOXES = """(type) => {
  const row = document.querySelector(`#groups tr[data-type="${type}"]`);
  const box = (el) => { const r = el.getBoundingClientRect();
                        return {left: r.left, right: r.right, width: r.width}; };
  return {count: row.querySelector('a.group-rows').textContent.trim(),
          pattern: row.querySelector('pre.pattern').textContent,
          examples: row.querySelectorAll('.example').length,
          boxes: [row.querySelector('pre.pattern'), row.querySelector('.examples'),
                  row.querySelector('button.retry-all'), row.querySelector('button.delete-all')]
                 .map(box),
          pageWidth: document.documentElement.scrollWidth};
}"""


@pytest.mark.parametrize("width", [390, 1280])
def test_the_failed_page_shows_a_group_of_ids_as_one_readable_block(served, width):
    """Twelve errors that differ in their ids and URL values are one group: its count, its
    pattern and two real examples, on screen and not squeezed, at 390 and 1280 px."""
    base = served[0]
    context = new_page(served, width)
    try:
        page = context.new_page()
        page.goto(f"{base}/failed")
        got = page.evaluate(GROUP_BOXES, GROUP_TYPE)
    finally:
        context.close()
    assert (got["count"], got["examples"]) == ("12", 2)
    assert got["pattern"] == ("requests.exceptions.HTTPError: <n> Server Error for url: "
                              "https://api.example.com/v<n>/accounts/<n>/messages?cursor=<v>")
    assert got["pageWidth"] <= width  # nothing scrolls sideways
    for box in got["boxes"]:
        assert box["left"] >= 0 and box["right"] <= width, (width, box)
    assert got["boxes"][0]["width"] >= 300, got["boxes"][0]  # the pattern is not squeezed


@pytest.mark.parametrize("width", [390, 1280])
def test_a_task_in_its_own_zone_shows_its_next_run_in_that_zone(served, width):
    base, _ids, _browser, _state = served
    context = new_page(served, width)
    page = context.new_page()
    try:
        page.goto(base + "/tasks")
        cell = page.locator("tr[data-task='tour-greet'] td.next-run")
        if width >= 1280:
            text = cell.inner_text()
            assert "America/New_York" in text and any(a in text for a in NEW_YORK), text
            assert any(f" 02:3{d}" in text for d in range(5)) or " 03:" in text, text
        else:
            assert not cell.is_visible()  # the phone hides the optional columns
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.goto(base + "/tasks/tour-greet")
        assert "America/New_York" in page.locator("#settings").inner_text()
        fires = page.locator("#fires li")
        assert fires.count() == 5
        for i in range(fires.count()):  # wall times in New York, each on screen
            text = fires.nth(i).inner_text()
            assert any(a in text for a in NEW_YORK), text
            box = fires.nth(i).bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (i, box)
    finally:
        context.close()
