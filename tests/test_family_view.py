"""A family as you see it (issue 38, point 3): `queue.children` / `queue.family`, the
family page and `/api/jobs/ID/family`, `cronjobs family ID`, the task page's family line,
and the Queue page's counts and status links that keep every filter."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from cronjobs import CronJobHandler, queue
from cronjobs.cli import main
from cronjobs.cli.family import progress_line, watch
from cronjobs.clock import FrozenClock
from cronjobs.errors import JobNotFound
from cronjobs.family.view import family_line, read_families
from cronjobs.store.models import cronjob_queue
from dashboard_helpers import (
    BEARER,
    TOKEN,
    add_row,
    csrf_of,
    login,
    wait_operation,
    web_client,
)

T0 = datetime(2026, 1, 5, 12, 30, 5)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def app(make_app):
    return make_app(clock=FrozenClock(T0 + timedelta(seconds=60)), dashboard_token=TOKEN)


def make_family(app, rows: list[dict], root_status: str = "completed",
                root_type: str = "test.count.discover") -> int:
    """A root started at T0 and `rows` under it (each dict: status and optional columns;
    `finished`: seconds after T0 for a finished row)."""
    root = add_row(app, type=root_type, status=root_status, attempts=1, started_at=T0,
                   finished_at=T0 + timedelta(seconds=0.3) if root_status in (
                       "completed", "failed") else None)
    base = {"type": "test.count.execute", "queue": "default", "priority": 5, "payload": "{}",
            "attempts": 1, "max_attempts": 3, "created_at": T0, "updated_at": T0,
            "parent_id": root, "root_id": root, "error": None, "fingerprint": None,
            "outcome_reason": None, "started_at": None, "finished_at": None}
    values = []
    for r in rows:
        r = dict(r)
        finished = r.pop("finished", None)
        if finished is not None:
            r["started_at"] = T0 + timedelta(seconds=finished - 0.1)
            r["finished_at"] = T0 + timedelta(seconds=finished)
        values.append({**base, **r})
    if values:
        with app.engine.begin() as conn:
            conn.execute(cronjob_queue.insert(), values)
    return root


def ids_under(app, root: int, status: str | None = None) -> list[int]:
    stmt = sa.select(cronjob_queue.c.id).where(cronjob_queue.c.root_id == root)
    if status:
        stmt = stmt.where(cronjob_queue.c.status == status)
    with app.engine.connect() as conn:
        return [r[0] for r in conn.execute(stmt.order_by(cronjob_queue.c.id))]


def finish(app, ids: list[int], status: str = "completed", at: float = 59) -> None:
    """Finish rows `ids` the way a worker's finish leaves them (status, times)."""
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id.in_(ids)).values(
            status=status, started_at=T0 + timedelta(seconds=at - 0.1),
            finished_at=T0 + timedelta(seconds=at)))


FAILED_502 = [{"status": "failed", "finished": 20 + i, "fingerprint": "f502",
               "error": f"RuntimeError: account {190 + i}: API answered 502"} for i in range(3)]


def sample(app) -> int:
    """6 completed, 3 failed alike (one fingerprint), 1 timeout, 2 running, 3 pending."""
    rows = ([{"status": "completed", "finished": 10 + i} for i in range(6)] + FAILED_502
            + [{"status": "failed", "finished": 30, "error": "JobTimeout: past 5 s",
                "outcome_reason": "timeout.killed"}]
            + [{"status": "running", "started_at": T0}] * 2 + [{"status": "pending"}] * 3)
    return make_family(app, rows)


def test_queue_children_and_family(app):
    root = sample(app)
    kids = ids_under(app, root)
    grandchild = add_row(app, type="test.count.execute", status="completed", parent_id=kids[0],
                         root_id=root, started_at=T0, finished_at=T0 + timedelta(seconds=40))
    children = queue.children(root)
    assert [c["id"] for c in children] == kids  # not the grandchild: its parent is a child
    assert {"payload", "root_id", "status"} <= set(children[0])
    assert queue.children(root, ["id", "status"], status="pending") == [
        {"id": i, "status": "pending"} for i in kids[-3:]]
    assert queue.children(grandchild) == []
    with pytest.raises(JobNotFound, match="no job with id 999999"):
        queue.children(999999)

    fam = queue.family(root)
    assert fam.root_id == root and fam.total == 16
    assert fam.counts == {"completed": 7, "failed": 4, "running": 2, "pending": 3}
    assert fam.progress == {"completed": 7, "failed": 4, "cancelled": 0, "expired": 0,
                            "running": 2, "pending": 3}
    assert fam.timeouts == 1 and not fam.complete and fam.generation == 0
    assert fam.duration_seconds == pytest.approx(40.0)  # root's start to the last finish
    assert [(g.count, g.key) for g in fam.failures] == [(3, "f502"), (1, "JobTimeout: past 5 s")]
    assert fam.failures[0].error == "RuntimeError: account 192: API answered 502"  # the newest
    assert fam.failures[0].example_ids == sorted(ids_under(app, root, "failed")[:3])[::-1]
    assert queue.family(grandchild).root_id == root  # any row gives its root's family
    assert queue.family(999999) is None
    assert family_line(fam) == ("16 children: 7 ok, 4 failed (1 timeouts), 2 running, "
                                "3 pending — 40.0 s so far")


def test_rate_and_eta_from_the_last_minute(app):
    clock = app.clock
    root = make_family(app, [{"status": "completed", "finished": 30 + i} for i in range(30)]
                       + [{"status": "pending"}] * 60)
    fam = queue.family(root)  # now = T0 + 60 s: 30 rows in the last minute
    assert fam.rate_per_second == pytest.approx(0.5) and fam.eta_seconds == pytest.approx(120)
    clock.set(T0 + timedelta(seconds=120))  # none finished in the last minute
    fam = queue.family(root)
    assert fam.rate_per_second == 0 and fam.eta_seconds is None
    clock.set(T0 + timedelta(seconds=20))  # younger than a minute: since the start
    finish(app, ids_under(app, root, "pending")[:10], at=15)
    fam = queue.family(root)
    assert fam.rate_per_second == pytest.approx(40 / 20)
    assert fam.eta_seconds == pytest.approx(50 / 2)


def test_failures_of_one_text_without_fingerprint_are_one_group(app):
    root = make_family(app, [{"status": "failed", "finished": 5, "error": "KeyError: 'chat_id'"}]
                       * 5 + [{"status": "failed", "finished": 6, "error": "boom"}])
    fam = queue.family(root)
    assert [(g.count, g.error) for g in fam.failures] == [(5, "KeyError: 'chat_id'"),
                                                          (1, "boom")]
    failed = ids_under(app, root, "failed")
    assert fam.failures[0].example_ids == failed[4:1:-1]  # the newest three


def test_api_family_json_and_404(app):
    root = sample(app)
    client = web_client(app)
    resp = client.get(f"/api/jobs/{root}/family", headers=BEARER)
    assert resp.status_code == 200
    data = resp.get_json()
    assert data["root_id"] == root and data["total"] == 15 and data["complete"] is False
    assert data["progress"]["pending"] == 3 and data["failures"][0]["count"] == 3
    assert data["first_started_at"] == "2026-01-05T12:30:05Z"
    assert data["callbacks"] == [] and data["eta_seconds"] is not None
    kid = ids_under(app, root)[0]
    assert client.get(f"/api/jobs/{kid}/family", headers=BEARER).get_json()["root_id"] == root
    missing = client.get("/api/jobs/999999/family", headers=BEARER)
    assert missing.status_code == 404 and "no job with id 999999" in missing.get_json()["error"]
    assert client.get(f"/api/jobs/{root}/family").status_code == 401


def test_family_page_live_part_cancel_and_retry_failed(app):
    root = sample(app)
    client = web_client(app)
    login(client)
    html = client.get(f"/jobs/{root}/family").get_data(as_text=True)
    assert 'id="progress"' in html and 'class="seg-completed" style="width: 40.0%"' in html
    assert f'data-live-url="/api/jobs/{root}/family/live"' in html
    assert "RuntimeError: account 192: API answered 502" in html and 'id="no-failures"' not in html
    assert f'href="/jobs/{root}/family/cancel"' in html and 'id="retry-failed"' in html
    kid = ids_under(app, root)[0]
    assert client.get(f"/jobs/{kid}/family").headers["Location"].endswith(f"/jobs/{root}/family")
    assert client.get("/jobs/999999/family").status_code == 404
    live = client.get(f"/api/jobs/{root}/family/live").get_json()
    assert live["done"] is False and live["progress"]["running"] == 2
    assert "seg-pending" in live["html"]
    # the job page of any row of the family links to it
    assert f'href="/jobs/{root}/family"' in client.get(f"/jobs/{kid}").get_data(as_text=True)

    confirm = client.get(f"/jobs/{root}/family/cancel").get_data(as_text=True)
    assert 'id="pending">3<' in confirm and 'id="running">2<' in confirm
    assert client.post(f"/jobs/{root}/family/cancel").status_code == 403  # no CSRF token
    resp = client.post(f"/jobs/{root}/family/cancel", data={"csrf_token": csrf_of(confirm)})
    assert resp.status_code == 303 and resp.headers["Location"].endswith("cancelled=5")
    assert len(ids_under(app, root, "cancelled")) == 3 and not ids_under(app, root, "pending")
    with app.engine.connect() as conn:  # the running rows: asked to stop, as Stop does
        stops = conn.execute(sa.text("SELECT COUNT(*) FROM cronjob_stop")).scalar()
    assert stops == 2

    page = client.get(f"/jobs/{root}/family").get_data(as_text=True)
    fields = dict(re.findall(r'name="(action|source|scope|root)" value="([^"]*)"', page))
    form = {**fields, "csrf_token": csrf_of(page)}
    confirm = client.post("/operations/confirm", data=form).get_data(as_text=True)
    assert "4 row(s)" in confirm and f"root={root}" in confirm
    started = client.post("/operations", data=form)
    assert started.status_code == 303
    op = wait_operation(app, int(started.headers["Location"].rsplit("/", 1)[1]))
    assert op["status"] == "done" and not ids_under(app, root, "failed")
    assert len(ids_under(app, root, "pending")) == 4


def test_cli_family_summary_json_and_unknown_id(app):
    root = sample(app)
    runner = CliRunner()
    out = runner.invoke(main, ["family", str(root), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["root_id"] == root and data["counts"]["failed"] == 4
    assert data["failures"][0]["key"] == "f502" and data["timeouts"] == 1
    text = runner.invoke(main, ["family", str(root)])
    assert text.exit_code == 0, text.output
    assert "15 children: 6 ok, 4 failed (1 timeouts), 2 running, 3 pending" in text.output
    assert "3 × RuntimeError: account 192: API answered 502" in text.output
    bad = runner.invoke(main, ["family", "999999"])
    assert bad.exit_code == 2 and bad.output.strip() == "error: no job with id 999999"
    watched = runner.invoke(main, ["family", str(root), "--watch", "--refreshes", "1"])
    assert watched.exit_code == 0 and "ok 6 failed 4 running 2 pending 3" in watched.output
    cancel = runner.invoke(main, ["family", "cancel", str(root)])
    assert cancel.exit_code == 0, cancel.output
    assert f"family of {root}: 3 row(s) cancelled, 2 asked to stop" in cancel.output
    assert len(ids_under(app, root, "cancelled")) == 3


@SQLITE
def test_watch_redraws_until_the_family_is_complete(app):
    root = make_family(app, [{"status": "pending"}] * 4)
    pending = ids_under(app, root, "pending")
    drawn: list[str] = []

    def step(_seconds):  # rows finish between two refreshes
        finish(app, [pending.pop(0), pending.pop(0)])

    fam = watch(lambda: queue.family(root), drawn.append, tty=True, sleep=step)
    assert fam.complete and len([d for d in drawn if d.startswith("\r")]) == 3
    assert "0/4" in drawn[0] and "2/4" in drawn[1] and drawn[2].endswith("complete")
    assert drawn[-1] == "\n"
    assert progress_line(fam).startswith("[" + "#" * 30 + "] 4/4")


def complete(app, root: int, outcome: str, callback_status: str) -> int:
    """Record completion 1 of family `root` and its callback row, as `family.settle` does."""
    from cronjobs.store.models import cronjob_family

    c = cronjob_queue.c
    with app.engine.begin() as conn:
        counts = dict(conn.execute(sa.select(c.status, sa.func.count()).where(
            c.root_id == root).group_by(c.status)).all())
        last = conn.execute(sa.select(sa.func.max(c.finished_at)).where(
            c.root_id == root)).scalar()
        conn.execute(cronjob_family.insert().values(
            root_id=root, generation=1, outcome=outcome, counts=json.dumps(counts),
            completed_at=last))
    return add_row(app, type="test.count.complete", status=callback_status, parent_id=root,
                   idempotency_key=f"family:{root}:1:complete",
                   payload={"family": root, "generation": 1})


class CountExecute(CronJobHandler):
    TYPE = "test.count.execute"
    MAX_ATTEMPTS = 7
    MAX_RUNTIME = 42

    def handle(self, payload, job):
        return {"success": True}


def test_task_page_family_line_duration_and_success_by_family(app):
    app.handlers.register(CountExecute.TYPE, CountExecute)
    good = make_family(app, [{"status": "completed", "finished": 9.2}] * 3)
    bad = sample(app)
    finish(app, ids_under(app, bad, "running") + ids_under(app, bad, "pending"), at=50)
    for root, outcome, status in ((good, "success", "completed"), (bad, "failure", "pending")):
        complete(app, root, outcome, status)
    alone = add_row(app, type="test.count.discover", status="completed", started_at=T0,
                    finished_at=T0 + timedelta(seconds=1))
    client = web_client(app)
    text = client.get("/tasks/test-count", headers=BEARER).get_data(as_text=True)
    runs = text.split('id="runs"', 1)[1].split("</table>", 1)[0]
    line = runs.split(f'data-id="{bad}"', 1)[1].split("</tr>", 1)[0]
    assert "15 children: 11 ok, 4 failed (1 timeouts) — 50.0 s — callback pending" in line
    assert f'href="/jobs/{bad}/family"' in line
    good_line = runs.split(f'data-id="{good}"', 1)[1].split("</tr>")[0]
    assert "3 children: 3 ok — 9.2 s — callback completed" in good_line
    assert "children" not in runs.split(f'data-id="{alone}"', 1)[1].split("</tr>")[0]
    # 2 of the 3 runs succeeded: the one with failed children did not
    assert "67" in text.split('id="run-stats"', 1)[1].split("</p>", 1)[0]
    other = text.split('class="other-type"', 1)[1].split("</tr>", 1)[0]
    assert "<code>test.count.execute</code>" in other and "Attempts 7" in other
    with app.engine.connect() as conn:
        fams = read_families(conn, [good, bad, alone, ids_under(app, bad)[0]])
    assert set(fams) == {good, bad, alone} and fams[alone].total == 0
    assert fams[bad].failures == [] and fams[bad].complete and fams[bad].outcome == "failure"
    assert [c["idempotency_key"] for c in fams[good].callbacks] == [f"family:{good}:1:complete"]
    assert fams[good].generation == 1 and fams[good].total == 3  # the callback is no member
    retried = ids_under(app, bad, "failed")[0]
    with app.engine.begin() as conn:  # a retry after the completion: read from the rows
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == retried)
                     .values(status="pending"))
        again = read_families(conn, [bad])[bad]
    assert again.counts["pending"] == 1 and not again.complete and again.generation == 1
    one = queue.family(good)
    assert one.callbacks[0]["status"] == "completed" and one.outcome == "success"
    assert queue.family(one.callbacks[0]["id"]).root_id == good  # a callback row: its root's


def test_queue_counts_and_status_links_keep_every_filter(app):
    root = sample(app)
    for _ in range(4):
        add_row(app, type="test.count.execute", status="failed", error="elsewhere")
    add_row(app, type="test.count.execute", status="failed", parent_id=root, root_id=root,
            queue="other")
    client = web_client(app)
    html = client.get(f"/queue?parent={root}&status=failed", headers=BEARER).get_data(as_text=True)
    counts = html.split('class="counts"', 1)[1].split("</p>", 1)[0]
    failed = re.search(r'data-status="failed">.*?<span class="n">(\d+)</span>', counts, re.S)
    assert failed[1] == "5"  # the parent's failed rows, not the table's 9
    assert f"/queue?status=pending&amp;parent={root}" in counts
    assert f'href="/jobs/{root}/family"' in html
    api = client.get(f"/api/queue?parent={root}&queue=other", headers=BEARER).get_json()
    assert api["counts"]["failed"] == [1, False] and api["counts"]["pending"] == [0, False]
    assert [r["status"] for r in api["rows"]] == ["failed"]
    assert "status=completed&amp;parent=" in api["html"] and "queue=other" in api["html"]
    typed = client.get("/api/queue?type=test.count.execute&queue=default",
                       headers=BEARER).get_json()
    assert typed["counts"]["failed"] == [8, False]
    assert client.get("/queue?queue=bad%20name", headers=BEARER).status_code == 400



def test_cronjobs_tasks_shows_the_last_run_family(app):
    from cronjobs.store.models import cronjob_runtime

    root = sample(app)
    runner = CliRunner()
    assert runner.invoke(main, ["tasks", "--json"]).exit_code == 0  # the runtime rows
    with app.engine.begin() as conn:
        conn.execute(cronjob_runtime.update().where(cronjob_runtime.c.task == "test-count")
                     .values(last_job_id=root, last_status="completed"))
    rows = {r["task"]: r for r in json.loads(runner.invoke(main, ["tasks", "--json"]).output)}
    assert rows["test-count"]["last_family"] == (
        "15 children: 6 ok, 4 failed (1 timeouts), 2 running, 3 pending — 30.0 s so far")
    wide = runner.invoke(main, ["tasks", "--wide"]).output
    assert "FAMILY" in wide.splitlines()[0] and "15 children: 6 ok" in wide
