"""Failures you can read (issue 38, point 4): a raised exception's traceback in the row (file
names, line numbers, bounded to 16 KB keeping the error's line), on the Job page, in
`/api/jobs/ID` and `cronjobs get`; the worker log's WARNING line naming the raising
frame; failures grouped by fingerprint on the Failed page and in `cronjobs failed`."""

from __future__ import annotations

import logging
import re
import signal
from datetime import datetime

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from cronjobs import limits, queue
from cronjobs.cli import main
from cronjobs.clock import FrozenClock
from cronjobs.job import failures
from cronjobs.job.executor import Executor, call_handler
from cronjobs.job.inline import InlineRunner
from cronjobs.job.outcome import Outcome, Policy, next_state
from cronjobs.store.finish import finish_many
from cronjobs.store.models import cronjob_queue as q
from cronjobs.worker import jobprocess
from dashboard_helpers import (
    BEARER,
    TOKEN,
    add_row,
    add_rows,
    login,
    row,
    wait_operation,
    web_client,
)

T0 = datetime(2026, 1, 5, 12, 0, 0)
BACKENDS = pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"],
                                   indirect=True)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
RAISE_LINE = "ShapeExecute.py:19"  # `raise ValueError("boom from handler")`


@pytest.mark.parametrize("error, expected", [
    ("account 190: API answered 502", "account <n>: API answered <n>"),
    ("account 7: API answered 503", "account <n>: API answered <n>"),
    ("KeyError: 'chat_id'", "KeyError: 'chat_id'"),  # a quoted name stays
    ("KeyError: 'user 12'", "KeyError: '<s>'"),
    ('ValueError: no chat "Team Q3 (2024)"', 'ValueError: no chat "<s>"'),
    ("can't reach 'db-1.internal:5432'", "can't reach '<s>'"),  # an apostrophe opens nothing
    ("ValueError: order 3f2a9c1b-1e2d-4c5b-9a8f-0123456789ab not found",
     "ValueError: order <uuid> not found"),
    ("RuntimeError: object at 0x7f3a2b1c0d, sha deadbeef12",
     "RuntimeError: object at <hex>, sha <hex>"),
    ("ValueError: bad id ord_8f7Gh2k", "ValueError: bad id <id>"),
    ("requests.exceptions.HTTPError: 404 Client Error for url: "
     "https://bot:s3cret@api.x.com/v2/users/123/posts?page=2&token=ab12cd#top.",
     "requests.exceptions.HTTPError: <n> Client Error for url: "
     "https://api.x.com/v<n>/users/<n>/posts?page=<v>&token=<v>."),
    ("psycopg2.errors.UniqueViolation: duplicate key \"ix_1\"",
     "psycopg2.errors.UniqueViolation: duplicate key \"<s>\""),  # the type stays as written
    ("timeout after 30 s (MAX_RUNTIME); job process killed",
     "timeout after <n> s (MAX_RUNTIME); job process killed"),
    ("  two\n lines\tof  text ", "two lines of text"),
    ("", ""),
    (None, ""),
])
def test_the_pattern_normalises_what_varies(error, expected):
    assert failures.pattern(error) == expected
    assert failures.fingerprint(error) == failures.digest(expected)
    assert re.fullmatch(r"[0-9a-f]{40}", failures.fingerprint(error))


def test_fingerprints_group_what_differs_only_in_values_and_part_the_rest():
    same = {failures.fingerprint(f"account {n}: API answered 502") for n in range(100)}
    assert len(same) == 1
    assert failures.fingerprint("KeyError: 'chat_id'") != failures.fingerprint("KeyError: 'user'")
    assert failures.fingerprint("ValueError: x 1") != failures.fingerprint("TypeError: x 1")
    head = "E" * failures.TEXT_CHARS  # only the first 200 characters decide
    assert failures.fingerprint(head + " 1") == failures.fingerprint(head + " something else")


def test_a_traceback_is_bounded_keeping_the_error_line_and_the_last_part():
    body = "".join(f'  File "deep.py", line {n}, in f\n    recurse()\n' for n in range(2000))
    body += "RecursionError: the end\n"
    text = failures.bounded("RecursionError: the end", body)
    assert len(text.encode("utf-8")) <= limits.TRACEBACK_MAX_BYTES
    assert text.startswith("RecursionError: the end\n[... ")
    assert " bytes of the traceback cut ...]\n" in text
    assert text.endswith("line 1999, in f\n    recurse()\nRecursionError: the end\n")
    first_kept = text.splitlines()[2]  # the tail starts at a whole line
    assert first_kept == "    recurse()" or first_kept.startswith('  File "deep.py", line ')
    small = failures.bounded("ValueError: x\nsecond line", "short\x00body")
    assert small == "ValueError: x\nshort\\0body"  # the first line only; cleaned
    wide = failures.bounded("é" * 5000, "🎉" * 10_000)  # multi-byte text: bytes count
    assert len(wide.encode("utf-8")) <= limits.TRACEBACK_MAX_BYTES
    assert wide.startswith("é" * failures.FIRST_LINE_MAX_CHARS + "\n")
    given = Outcome("failed", error="x", traceback="x\n" + body).traceback  # bounded too
    assert given.startswith("x\n[... ") and given.endswith(text[-2000:])
    assert len(given.encode("utf-8")) <= limits.TRACEBACK_MAX_BYTES


@BACKENDS
def test_a_raised_exception_leaves_its_traceback_and_group_in_the_row(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "raise"})
    InlineRunner(Executor(app)).run_id(job_id)
    stored = queue.get(job_id)
    assert stored["status"] == "pending" and stored["error"] == "ValueError: boom from handler"
    lines = stored["traceback"].splitlines()
    assert lines[0] == "ValueError: boom from handler"
    assert lines[1] == "Traceback (most recent call last):" and lines[-1] == lines[0]
    assert re.search(r'File ".*ShapeExecute\.py", line 19, in handle', stored["traceback"])
    assert stored["fingerprint"] == failures.fingerprint(stored["error"])
    app.clock.set(stored["scheduled_at"])  # the retry succeeds: error, traceback, group go
    _set_payload(app, job_id, '{"shape": "true"}')
    InlineRunner(Executor(app)).run_id(job_id)
    done = queue.get(job_id)
    assert (done["status"], done["error"], done["traceback"], done["fingerprint"]) == (
        "completed", None, None, None)


def _set_payload(app, job_id: int, payload: str) -> None:
    with app.engine.begin() as conn:
        conn.execute(q.update().where(q.c.id == job_id).values(payload=payload))


def test_a_completed_run_writes_no_traceback_or_fingerprint_columns():
    policy = Policy()
    job = _job(error=None)
    ok = next_state(job, Outcome("completed"), T0, policy)
    assert "traceback" not in ok.values and "fingerprint" not in ok.values  # the hot path
    failed = next_state(job, Outcome("failed", error="account 7: x", traceback="t\nb"), T0,
                        policy)
    assert failed.values["traceback"] == "t\nb"
    assert failed.values["fingerprint"] == failures.fingerprint("account 7: x")
    cut_off = next_state(_job(error="old"), Outcome("cut_off"), T0, policy)
    assert not {"error", "traceback", "fingerprint"} & set(cut_off.values)  # the last stays


def _job(error: str | None):
    from cronjobs.handler import Job

    return Job(id=1, type="a.b.execute", queue="default", status="running", priority=5,
               payload={}, result=None, process_logs=None, error=error, attempts=1,
               max_attempts=3, idempotency_key=None, parent_id=None, title=None,
               scheduled_at=None, started_at=T0, finished_at=None, locked_until=None,
               worker_id="w", created_at=T0, updated_at=T0)


@BACKENDS
def test_a_batch_of_outcomes_writes_tracebacks_beside_completed_rows(make_app):
    app = make_app(clock=FrozenClock(T0))
    ids = [queue.dispatch("test.shape.execute", {"shape": "true"}) for _ in range(3)]
    with app.engine.begin() as conn:
        conn.execute(q.update().where(q.c.id.in_(ids)).values(status="running", attempts=1))
        written = finish_many(conn, [
            (ids[0], 1, {"status": "completed", "error": None}),
            (ids[1], 1, {"status": "failed", "error": "E: 1", "traceback": "E: 1\ntb one",
                         "fingerprint": failures.fingerprint("E: 1")}),
            (ids[2], 1, {"status": "failed", "error": "E: 2", "traceback": "E: 2\ntb two",
                         "fingerprint": failures.fingerprint("E: 2")})])
    assert written == set(ids)
    got = [queue.get(i, ["traceback", "fingerprint"]) for i in ids]
    assert [g["traceback"] for g in got] == [None, "E: 1\ntb one", "E: 2\ntb two"]
    assert got[1]["fingerprint"] == got[2]["fingerprint"] == failures.digest("E: <n>")


def test_the_warning_line_names_the_raising_frame(make_app, caplog):
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "raise"})
    job = Executor(app).prepare(queue.get(job_id), Executor(app).terms("test.shape.execute")).job
    with caplog.at_level(logging.DEBUG, logger="cronjobs.worker.loop"):
        outcome = call_handler(app, job)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and re.fullmatch(
        rf"job {job_id} failed: ValueError: boom from handler \(\S*{RAISE_LINE}\)",
        warnings[0]), warnings
    assert outcome.traceback.startswith("ValueError: boom from handler\nTraceback")


def test_where_names_the_handler_frame_too_when_a_library_raised():
    class Handler:
        def handle(self):
            return int("x")  # raises inside the int() call of this file

    try:
        Handler().handle()
    except ValueError as exc:
        shown = failures.where(exc, Handler)
    assert re.fullmatch(r"\S*test_failures_readable\.py:\d+", shown)  # int() has no frame
    try:
        re.compile("(")  # raises in the standard library, called from here
    except re.error as exc:
        shown = failures.where(exc, Handler)
    assert re.fullmatch(r"re/_parser\.py:\d+ via \S*test_failures_readable\.py:\d+", shown) \
        or re.fullmatch(r"sre_parse\.py:\d+ via \S*test_failures_readable\.py:\d+", shown), shown


@SQLITE
def test_a_timeout_in_a_job_process_keeps_where_the_handler_was(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.sleep.execute", {"seconds": 5})
    executor = Executor(app)
    job = executor.prepare(queue.get(job_id), executor.terms("test.sleep.execute")).job

    def alarm(signum, frame):
        raise jobprocess.RuntimeLimit()

    before = signal.signal(signal.SIGALRM, alarm)
    try:
        outcome, keep_going = jobprocess.run_one(app, job, 0.2)
    finally:
        signal.signal(signal.SIGALRM, before)
    assert not keep_going and outcome.error.startswith("timeout after 0.2 s")
    assert outcome.traceback.startswith(outcome.error + "\nTraceback")
    assert re.search(r'SleepExecute\.py", line \d+, in handle\n\s+time\.sleep', outcome.traceback)


@SQLITE
def test_the_traceback_is_on_the_job_page_in_the_api_and_in_cronjobs_get(make_app):
    app = make_app(clock=FrozenClock(T0), dashboard_token=TOKEN)
    job_id = queue.dispatch("test.shape.execute", {"shape": "raise"})
    InlineRunner(Executor(app)).run_id(job_id)
    client = web_client(app)
    login(client)
    html = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    box = re.search(r'<details class="traceback" id="traceback-box">(.*?)</details>', html,
                    re.S)
    assert box and "<summary>Traceback</summary>" in box.group(1)
    assert re.search(r"File &#34;.*ShapeExecute\.py&#34;, line 19, in handle", box.group(1))
    assert client.get(f"/jobs/{job_id}/raw/traceback").get_data(as_text=True).startswith(
        "ValueError: boom from handler\nTraceback")
    api = client.get(f"/api/jobs/{job_id}", headers=BEARER).get_json()
    assert RAISE_LINE.replace(".py:", '.py", line ') in api["traceback"]
    assert api["fingerprint"] == failures.fingerprint("ValueError: boom from handler")
    printed = CliRunner().invoke(main, ["get", str(job_id)])
    assert printed.exit_code == 0 and 'ShapeExecute.py\\", line 19, in handle' in printed.output
    plain = CliRunner().invoke(main, ["get", str(job_id), "--traceback"])
    assert plain.exit_code == 0, plain.output
    assert plain.output.splitlines()[0] == "ValueError: boom from handler"
    assert re.search(r'ShapeExecute\.py", line 19, in handle\n', plain.output)
    fine = queue.dispatch("test.shape.execute", {"shape": "true"})
    InlineRunner(Executor(app)).run_id(fine)
    assert 'id="traceback-box"' not in client.get(f"/jobs/{fine}").get_data(as_text=True)
    none = CliRunner().invoke(main, ["get", str(fine), "--traceback"])
    assert none.exit_code == 1 and f"job {fine} has no traceback" in none.output


@SQLITE
def test_a_hundred_failures_with_ids_are_one_group_and_retried_as_one(make_app):
    app = make_app(clock=FrozenClock(T0), dashboard_token=TOKEN)
    kind = "test.summary.execute"
    marked = [{"error": f"account {n}: API answered 502",
               "fingerprint": failures.fingerprint(f"account {n}: API answered 502")}
              for n in range(60)]
    add_rows(app, 60, type=kind, status="failed", attempts=3, finished_at=T0)
    with app.engine.begin() as conn:  # 60 written by this version, 40 before migration 0013
        ids = [r.id for r in conn.execute(sa.select(q.c.id).order_by(q.c.id))]
        for job_id, values in zip(ids, marked, strict=True):
            conn.execute(q.update().where(q.c.id == job_id).values(**values))
    for n in range(40):
        add_row(app, type=kind, status="failed", attempts=3, finished_at=T0,
                error=f"account {1000 + n}: API answered 503")
    other = add_row(app, type=kind, status="failed", attempts=3, error="KeyError: 'chat_id'")
    with app.engine.connect() as conn:
        groups = failures.groups(conn)
    assert [(g["count"], g["pattern"]) for g in groups] == [
        (100, "account <n>: API answered <n>"), (1, "KeyError: 'chat_id'")]
    assert len(groups[0]["examples"]) == 2 and len(groups[0]["unmarked"]) == 40
    client = web_client(app)
    csrf = login(client)
    html = client.get("/failed").get_data(as_text=True)
    assert html.count('class="group-rows"') == 2 and ">100</a>" in html
    assert "account &lt;n&gt;: API answered &lt;n&gt;" in html and "e.g." in html
    newest = groups[0]["newest_id"]
    assert "account 1039: API answered 503" in html and f"#{newest}" in html
    listed = CliRunner().invoke(main, ["failed"])
    assert listed.exit_code == 0, listed.output
    lines = [line for line in listed.output.splitlines() if kind in line]
    assert len(lines) == 2 and re.match(rf"100\s+{re.escape(kind)}\s+{newest}\s+account <n>: "
                                        rf"API answered <n>\s+#{newest} account 1039", lines[0])
    page = client.get(f"/failed?group={ids[5]}").get_data(as_text=True)
    assert "Retry all 100 failed rows of this group" in page
    resp = client.post("/failed/retry", data={"csrf_token": csrf, "job": str(ids[5])})
    assert resp.status_code == 303
    op = wait_operation(app, 1)
    assert op["changed_rows"] == 100 and 'group="account <n>: API answered <n>"' in (
        op["selection"])
    assert row(app, other)["status"] == "failed"
    assert {row(app, i)["status"] for i in ids} == {"pending"}
