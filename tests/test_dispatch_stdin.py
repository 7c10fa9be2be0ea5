"""`cronjobs dispatch --stdin` turns JSON lines into rows: every line checked before any row
is inserted (a bad line: exit 2, one line naming it, nothing inserted), then 1,000 rows a
transaction, their ids printed in input order (or their count with `--quiet`), and the
queues rung."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime

import pytest
import redis
import sqlalchemy as sa

from conftest import REDIS, cli_env
from cronjobs import limits
from cronjobs.store.models import cronjob_queue as q
from tty_helpers import run_piped

KIND = "test.summary.execute"


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def good(n: int, start: int = 0) -> list[dict]:
    return [{"type": KIND, "payload": {"n": i}} for i in range(start, start + n)]


def table(app) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(q).order_by(q.c.id)).mappings()]


def dispatch(db_url, tmp_path, data: bytes, *args: str, **env):
    return run_piped(["dispatch", "--stdin", *args], cli_env(db_url, **env), tmp_path,
                     stdin=data)


def test_three_thousand_lines_become_three_thousand_rows_in_order(make_app, db_url, tmp_path):
    app = make_app()
    out = dispatch(db_url, tmp_path, jsonl(good(3000)))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    ids = [int(line) for line in out.stdout.splitlines()]
    rows = table(app)
    assert len(ids) == len(rows) == 3000
    assert ids == [r["id"] for r in rows]
    assert [json.loads(r["payload"]) for r in rows] == [{"n": i} for i in range(3000)]
    assert {(r["type"], r["status"], r["queue"]) for r in rows} == {(KIND, "pending", "default")}


def test_quiet_prints_the_count(make_app, db_url, tmp_path):
    app = make_app()
    out = dispatch(db_url, tmp_path, jsonl(good(2500)), "--quiet")
    assert (out.returncode, out.stdout, out.stderr) == (0, "dispatched 2500 row(s)\n", "")
    assert len(table(app)) == 2500


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
def test_every_field_of_a_line_and_a_file_on_stdin(make_app, db_url, tmp_path):
    app = make_app()
    parent = json.loads(dispatch(db_url, tmp_path, jsonl(good(1))).stdout)
    lines = [{"type": KIND, "payload": {"user": 7}, "key": "sync-7", "priority": 3,
              "at": "2030-01-01T09:00+02:00", "title": "Sync user 7", "parent": parent,
              "max_attempts": 5},
             {"type": KIND, "key": "sync-7"},  # the key is taken: the holder's id
             {"type": "elsewhere.sync.execute"}]  # known to another codebase (--remote)
    path = tmp_path / "jobs.jsonl"
    path.write_bytes(b"\n" + jsonl(lines) + b"   \n")  # blank lines are skipped
    with path.open("rb") as stdin:  # a file: read twice from where it started, no copy
        done = subprocess.run(
            [sys.executable, "-m", "cronjobs", "dispatch", "--stdin", "--remote"],
            env=cli_env(db_url), cwd=tmp_path, stdin=stdin, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    first, again, remote = (int(x) for x in done.stdout.split())
    assert again == first
    row = {r["id"]: r for r in table(app)}[first]
    assert (row["idempotency_key"], row["priority"], row["title"], row["parent_id"],
            row["max_attempts"], json.loads(row["payload"])) == (
        "sync-7", 3, "Sync user 7", parent, 5, {"user": 7})
    assert row["scheduled_at"] == datetime(2030, 1, 1, 7, 0)
    assert {r["id"]: r for r in table(app)}[remote]["type"] == "elsewhere.sync.execute"
    assert len(table(app)) == 3


def deep(levels: int) -> bytes:
    """A line whose payload nests `levels` arrays (written as text: `json.dumps` would
    recurse)."""
    return (b'{"type": "test.summary.execute", "payload": {"a": ' + b"[" * levels + b"1"
            + b"]" * levels + b"}}")


BAD = {
    "not JSON": (b'{"type": "test.summary.execute", "payload": {', "not valid JSON"),
    "not an object": (b'["test.summary.execute"]', "must be a JSON object"),
    "unknown type": (b'{"type": "test.nope.execute"}', "unknown job type 'test.nope.execute'"),
    "too deep": (deep(150), "nested more than 100 levels deep"),
    "deeper than the parser": (deep(5000), "nested more than 100 levels deep"),
    "unknown key": (b'{"type": "test.summary.execute", "idempotency_key": "k"}',
                    "unknown key 'idempotency_key' (did you mean 'key'?)"),
    "no type": (b'{"payload": {}}', 'no "type"'),
    "bad time": (b'{"type": "test.summary.execute", "at": "tomorrow"}',
                 "\"at\" not an ISO 8601 time: 'tomorrow'"),
    "bad priority": (b'{"type": "test.summary.execute", "priority": "high"}',
                     "priority must be an integer"),
    "max attempts over the column's range": (
        b'{"type": "test.summary.execute", "max_attempts": 99999999999}',
        "max attempts must be an integer from 1 to 2**31-1, got 99999999999"),
    "not UTF-8": (b'{"type": "test.summary.execute", "title": "\xff"}', "not UTF-8"),
    "too long": (b'{"type": "test.summary.execute", "title": "'
                 + b"x" * limits.STDIN_LINE_MAX_BYTES + b'"}',
                 f"longer than {limits.STDIN_LINE_MAX_BYTES:,} bytes"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_line_inserts_nothing_and_names_its_number(make_app, db_url, tmp_path, case):
    app = make_app()
    line, reason = BAD[case]
    data = jsonl(good(2499)) + line + b"\n" + jsonl(good(500, start=2499))
    out = dispatch(db_url, tmp_path, data)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith("error: line 2500: ") and reason in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert table(app) == []


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)
def test_a_missing_parent_is_refused_by_its_line_before_any_insert(make_app, db_url, tmp_path):
    app = make_app()
    parent = good(1)[0]
    out = dispatch(db_url, tmp_path, jsonl([parent]))
    rows = good(2500)
    rows[10]["parent"] = int(out.stdout)  # exists
    rows[1500]["parent"] = rows[2400]["parent"] = 10**12
    out = dispatch(db_url, tmp_path, jsonl(rows))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == "error: line 1501: parent job 1000000000000 does not exist\n"
    assert len(table(app)) == 1


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)
def test_a_parent_gone_after_the_check_stops_at_its_batch(make_app, capsys):
    """The database still refuses a batch whose parent went away after the check (a
    cleanup in between): the batches before it stay, their ids printed."""
    from cronjobs import queue
    from cronjobs.cli import stdin

    app = make_app()
    rows = good(2500)
    rows[1500]["parent"] = 10**12
    lines = [(n, json.dumps(r).encode()) for n, r in enumerate(rows, start=1)]
    with pytest.raises(Exception, match="^lines 1001-2000: ") as caught:
        stdin._insert(app, queue, iter(lines), len(rows), remote=False, quiet=False)
    assert str(caught.value).endswith(
        "; not inserted, the 1,000 row(s) of the lines before were (ids printed)")
    ids = [int(x) for x in capsys.readouterr().out.split()]
    assert ids == [r["id"] for r in table(app)] and len(ids) == 1000


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("args, message", [
    (["dispatch", "test.summary.execute", "--stdin"], "each line names its type"),
    (["dispatch", "--stdin", "--payload", "{}"], "--payload cannot be given too"),
    (["dispatch", "--stdin", "--priority", "5"], "--priority cannot be given too"),
    (["dispatch", "test.summary.execute", "--quiet"], "--quiet goes with --stdin"),
])
def test_stdin_options_that_do_not_go_together(make_app, db_url, tmp_path, args, message):
    app = make_app()
    out = run_piped(args, cli_env(db_url), tmp_path, stdin=jsonl(good(3)))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: ") and message in out.stderr, out.stderr
    assert table(app) == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_queues_are_rung_through_redis(make_app, db_url, tmp_path, namespace):
    make_app()
    client = redis.Redis.from_url(REDIS)
    try:
        one = run_piped(["dispatch", KIND], cli_env(db_url, namespace, REDIS), tmp_path)
        assert one.returncode == 0, one.stderr
        assert _messages(client, namespace) == [int(one.stdout)]  # the doorbell of one row
        many = dispatch(db_url, tmp_path, jsonl(good(2500)), CRONJOBS_BROKER_URL=REDIS,
                        CRONJOBS_BROKER_NAMESPACE=namespace)
        assert many.returncode == 0, many.stderr
        ids = [int(x) for x in many.stdout.split()]
        # at most 16 doorbells per queue per batch of 1,000: 3 batches
        assert _messages(client, namespace)[1:] == ids[:16] + ids[1000:1016] + ids[2000:2016]
    finally:
        client.close()


def _messages(client: redis.Redis, namespace: str) -> list[int]:
    """The row ids carried by the messages waiting in the `default` queue, in order."""
    ids = client.lrange(f"{namespace}:default", 0, -1)
    bodies = client.hmget(f"{namespace}:default.msgs", ids) if ids else []
    return [json.loads(body)["args"][0] for body in bodies]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_callback_url_is_an_option_and_a_line_field(make_app, db_url, tmp_path):
    """docs/http-api.md says POST /api/jobs takes the fields of `cronjobs dispatch`:
    `callback_url` too (fix-sec1); the option in-process, a line in one process."""
    from click.testing import CliRunner

    from cronjobs.cli import main

    app = make_app()
    runner = CliRunner()
    url = "https://hooks.example/cron"
    one = runner.invoke(main, ["dispatch", KIND, "--callback-url", url])
    assert one.exit_code == 0, one.output
    line = json.dumps({"type": KIND, "callback_url": url + "/2"}) + "\n"
    many = dispatch(db_url, tmp_path, line.encode(), "--quiet")
    assert many.returncode == 0, many.stderr
    assert [r["callback_url"] for r in table(app)] == [url, url + "/2"]
    bad = runner.invoke(main, ["dispatch", KIND, "--callback-url", "ftp://x"])
    assert bad.exit_code == 2 and "ftp://x" in bad.output, bad.output
    both = runner.invoke(main, ["dispatch", "--stdin", "--callback-url", url], input=b"")
    assert both.exit_code == 2 and "--callback-url cannot be given too" in both.output
    assert len(table(app)) == 2
