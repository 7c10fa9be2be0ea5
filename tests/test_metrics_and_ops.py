"""/metrics, `cronjobs failed` and `cronjobs health` on the command line
(point 9, same code path as the Failed page), `cronjobs dashboard` refusing a public address
without a token, and the message catalogs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import cli_env, run_cli
from cronjobs import queue
from cronjobs.store.models import cronjob_worker
from cronjobs.testing import drain
from dashboard_helpers import BEARER, TOKEN, add_row, db_now, row, web_client

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
BOTH = pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)


def scrape(client) -> dict:
    resp = client.get("/metrics", headers=BEARER)
    assert resp.status_code == 200 and resp.mimetype == "text/plain"
    samples = {}
    for family in text_string_to_metric_families(resp.get_data(as_text=True)):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


@BOTH
def test_metrics_parse_and_counters_move_after_jobs_run(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    before = scrape(client)
    assert before[("cronjobs_live_workers", ())] == 0
    ok = queue.dispatch("test.shape.execute", {"shape": "true"})
    bad = queue.dispatch("test.shape.execute", {"shape": "false"}, max_attempts=2)
    add_row(app, queue="orphaned", created_at=app.clock.now())
    mid = scrape(client)
    assert mid[("cronjobs_rows", (("queue", "default"), ("status", "pending")))] == 2
    # a queue no handler or worker uses is labelled "other" (the labels stay bounded)
    assert mid[("cronjobs_due_rows", (("queue", "other"),))] == 1
    assert ("cronjobs_oldest_due_age_seconds", (("queue", "other"),)) in mid
    drain(app)
    now = db_now(app)  # heartbeat ages follow the database's clock
    with app.engine.begin() as conn:  # the retry of `bad` is due in 2 minutes: make it due now
        from cronjobs.store.models import cronjob_queue as q

        conn.execute(q.update().where(q.c.id == bad).values(scheduled_at=None))
        conn.execute(cronjob_worker.insert().values(
            id="w", host="h", pid=1, queues="default", status="running", started_at=now,
            last_seen_at=now, jobs_done=2))
    drain(app)
    assert (row(app, ok)["status"], row(app, bad)["status"]) == ("completed", "failed")
    add_row(app, type="test.slow.execute", status="failed", attempts=1, started_at=app.clock.now(),
            finished_at=app.clock.now(),
            error="timeout after 5 s (MAX_RUNTIME); job process killed",
            outcome_reason="timeout.killed")
    after = scrape(client)
    t = ("type", "test.shape.execute")
    assert after[("cronjobs_jobs_finished_total", (("status", "completed"), t))] == 1
    assert after[("cronjobs_jobs_finished_total", (("status", "failed"), t))] == 1
    assert after[("cronjobs_job_retries_total", (t,))] == 1
    assert after[("cronjobs_job_duration_seconds_count", (t,))] == 2
    assert after[("cronjobs_live_workers", ())] == 1
    assert after[("cronjobs_rows", (("queue", "default"), ("status", "failed")))] == 2
    assert after[("cronjobs_job_timeouts_total", (("type", "test.slow.execute"),))] == 1
    assert scrape(client)[("cronjobs_jobs_finished_total", (("status", "completed"), t))] == 1


@SQLITE
def test_metrics_need_the_token_unless_public(make_app):
    app = make_app(dashboard_token=TOKEN)
    assert web_client(app).get("/metrics").status_code == 401
    public = make_app(dashboard_token=TOKEN, metrics_public=True)
    assert web_client(public).get("/metrics").status_code == 200


@BOTH
def test_failed_command_lists_groups_and_retries(db_url, make_app, tmp_path):
    app = make_app()
    a = [add_row(app, status="failed", error="HTTP 500", attempts=3) for _ in range(2)]
    b = add_row(app, status="failed", error="timeout", type="test.shape.execute", attempts=3)
    env = cli_env(db_url)
    out = run_cli(["failed"], env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["COUNT", "TYPE", "NEWEST", "PATTERN", "E.G."]
    assert lines[1].split()[:3] == ["2", "test.summary.execute", str(a[-1])]
    assert lines[2].split()[:3] == ["1", "test.shape.execute", str(b)]
    typed = run_cli(["failed", "--type", "test.shape.execute", "--retry"], env, cwd=tmp_path)
    assert typed.stdout.strip() == "retried 1 failed row(s) of type test.shape.execute"
    assert row(app, b)["status"] == "pending" and row(app, a[0])["status"] == "failed"
    rest = run_cli(["failed", "--retry"], env, cwd=tmp_path)
    assert rest.stdout.strip() == "retried 2 failed row(s)"
    assert all(row(app, i)["status"] == "pending" and row(app, i)["attempts"] == 0 for i in a)
    assert "retried by cli" in row(app, a[0])["process_logs"]
    assert run_cli(["failed"], env, cwd=tmp_path).stdout.strip() == "no failed rows"


@SQLITE
def test_health_command_table_and_exit_status(db_url, make_app, tmp_path):
    make_app()
    out = run_cli(["health"], cli_env(db_url), cwd=tmp_path)
    assert out.returncode == 2, out.stderr  # the scheduler has never run
    assert out.stdout.splitlines()[0].split() == ["CHECK", "STATUS", "MESSAGE"]
    assert "FAIL: the scheduler has never started a task" in out.stdout
    assert out.stdout.rstrip().endswith("health: fail")


@SQLITE
def test_dashboard_on_a_public_address_needs_a_token(db_url, tmp_path):
    out = run_cli(["dashboard", "--host", "0.0.0.0", "--port", "0"], cli_env(db_url), cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: refusing to serve the dashboard on 0.0.0.0 without a "
                                  "token: set CRONJOBS_DASHBOARD_TOKEN (or listen on 127.0.0.1)")


@SQLITE
@pytest.mark.parametrize("command", ["dashboard", "serve"])
def test_a_taken_port_is_one_line_and_exit_2(db_url, tmp_path, command):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_cli([command, "--port", str(port)], cli_env(db_url), cwd=tmp_path)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.strip() == f"error: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_message_catalogs_are_compiled_and_complete():
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    folder = Path(__file__).resolve().parents[1] / "src" / "cronjobs" / "web" / "translations"
    for lang in ("en", "tr"):
        po = folder / lang / "LC_MESSAGES" / "messages.po"
        with po.open("rb") as f:
            catalog = read_po(f)
        compiled = io.BytesIO()
        write_mo(compiled, catalog)
        assert compiled.getvalue() == po.with_suffix(".mo").read_bytes(), (
            f"{po.with_suffix('.mo')} is stale: run `pybabel compile -d {folder}`")
        if lang == "tr":
            untranslated = [m.id for m in catalog if m.id and not m.string]
            assert untranslated == []
    templates = (folder.parent / "templates").glob("*.html")
    import re

    used = {m for t in templates for m in re.findall(r"_\('([^']+)'", t.read_text())}
    with (folder / "tr" / "LC_MESSAGES" / "messages.po").open("rb") as f:
        known = {m.id for m in read_po(f)}
    assert used - known == set()


@SQLITE
def test_dashboard_command_serves_the_pages_and_stops_on_sigterm(db_url, tmp_path):
    import re
    import signal
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    env = cli_env(db_url, CRONJOBS_DASHBOARD_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "dashboard", "--port", "0"],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        hint = proc.stdout.readline()
        url = re.search(r"dashboard at (http://127\.0\.0\.1:\d+)/", first)[1]
        assert "log in at" in hint and TOKEN not in hint  # a configured token is not printed
        with urllib.request.urlopen(urllib.request.Request(url + "/", headers=BEARER),
                                    timeout=10) as resp:
            assert resp.status == 200 and b"<h1>Overview</h1>" in resp.read()
        try:
            urllib.request.urlopen(url + "/queue", timeout=10)
            raise AssertionError("answered without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        proc.stdout.close()
    assert code == 0
