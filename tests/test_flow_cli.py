"""The flow-control commands: `pause` and `resume` of a queue, type or task, `limits` (text
and JSON: who, when, why, until, and the configured limits), `unblock`; bad input is one
line on stderr with exit status 2 and writes nothing."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import SAMPLE_HANDLERS, cli_env, run_cli
from cronjobs import store

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def one_line_error(out) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


def test_pause_limits_resume_and_unblock(make_app, db_url, namespace):
    app = make_app()
    env = cli_env(db_url, namespace)
    out = run_cli(["pause", "--task", "nightly-report", "--for", "90s", "--reason", "quiet"], env)
    assert out.returncode == 0 and out.stdout.startswith("paused task nightly-report until ")
    now = app.clock.now()
    with app.engine.begin() as conn:
        assert store.is_task_paused(conn, "nightly-report", now)
        block = store.block(conn, "test.shape.execute", "4711", now=now,
                            until=now + timedelta(minutes=5), reason="FloodWait 300")
    assert run_cli(["pause", "--queue", "mail"], env).returncode == 0  # open-ended
    text = run_cli(["limits"], env)
    assert text.returncode == 0, text.stderr
    assert "PAUSES: 2" in text.stdout and "quiet" in text.stdout
    assert "(until resumed)" in text.stdout  # not "resumed", which reads as done
    assert "BLOCKS: 1" in text.stdout and "FloodWait 300" in text.stdout
    blocks_header = text.stdout.split("BLOCKS: 1")[1].splitlines()[1]
    assert "CREATED_AT" in blocks_header and "UNTIL" in blocks_header
    assert text.stdout.rstrip().endswith("HELD: none")  # no due row waits
    data = json.loads(run_cli(["limits", "--json"], env).stdout)
    assert sorted((p["scope"], p["name"], p["reason"]) for p in data["pauses"]) == [
        ("queue", "mail", None), ("task", "nightly-report", "quiet")]
    timed = next(p for p in data["pauses"] if p["scope"] == "task")
    assert "@" in timed["created_by"] and timed["until"].endswith("Z")
    assert [(b["id"], b["limit_key"]) for b in data["blocks"]] == [(block["id"], "4711")]
    assert run_cli(["unblock", str(block["id"])], env).stdout.strip() == \
        f"lifted block {block['id']}"
    assert one_line_error(run_cli(["unblock", str(block["id"])], env)) == \
        f"error: no live block with id {block['id']} (`cronjobs limits` lists them)"
    gone = run_cli(["unblock", "--type", "test.shape.execute"], env)
    assert (gone.returncode, gone.stdout.strip()) == (0, "no block of test.shape.execute")
    assert run_cli(["resume", "--task", "nightly-report"], env).stdout.strip() == \
        "resumed task nightly-report"
    assert run_cli(["resume", "--task", "nightly-report"], env).stdout.strip() == \
        "task nightly-report was not paused"


def test_bad_input_is_one_line_and_exit_2(make_app, db_url, namespace):
    app = make_app()
    env = cli_env(db_url, namespace)
    for args, needle in (
            (["pause"], "name exactly one of --queue, --type, --task"),
            (["pause", "--queue", "a", "--type", "b.execute"], "name exactly one of"),
            (["pause", "--queue", "mail", "--for", "soon"], "must be a duration such as 90s"),
            (["pause", "--queue", "mail", "--for", "0s"], "must be a duration such as 90s"),
            (["pause", "--queue", "a b"], "queue name 'a b' may only contain"),
            (["resume", "--queue", "x" * 70], "queue name is 70 characters"),
            (["unblock"], "give a block id, or --type"),
            (["unblock", "--key", "4711"], "give a block id, or --type"),
            (["pause", "--queue", "mail", "--reason", "é" * 251], "reason is 502 bytes; the "
                                                                   "limit is 500")):
        assert needle in one_line_error(run_cli(args, env)), args
    with app.engine.begin() as conn:
        assert store.list_pauses(conn, app.clock.now()) == []


def test_tasks_shows_limits_and_the_pauses_holding_a_task(make_app, db_url, namespace):
    make_app()
    flow = str(Path(__file__).parent / "flow_handlers")
    env = cli_env(db_url, namespace, CRONJOBS_HANDLER_PATHS=f"{SAMPLE_HANDLERS}{os.pathsep}{flow}")
    assert run_cli(["pause", "--task", "flow-keyed"], env).returncode == 0
    out = run_cli(["tasks", "--json"], env)
    assert out.returncode == 0, out.stderr
    rows = {r["task"]: r for r in json.loads(out.stdout)}
    assert rows["flow-keyed"]["limits"] == "at most 2 running per chat"
    assert rows["flow-rated"]["limits"] == "10/s"
    assert (rows["flow-keyed"]["paused_by"], rows["flow-rated"]["paused_by"]) == \
        ("task flow-keyed", "")
    text = run_cli(["tasks"], env).stdout
    assert "LIMITS" in text.upper() and "PAUSED" in text.upper()
    assert "at most 2 running per chat" in text


def test_a_pause_of_an_unknown_name_warns_and_an_empty_key_or_huge_id_is_refused(
        make_app, db_url, namespace):
    make_app()
    env = cli_env(db_url, namespace)
    out = run_cli(["pause", "--queue", "nosuch"], env)
    assert out.returncode == 0 and out.stdout.startswith("paused queue nosuch")
    assert "warning: no registered handler has queue 'nosuch' (a typo?)" in out.stderr
    out = run_cli(["pause", "--type", "test.shape.execute"], env)
    assert out.returncode == 0 and out.stderr == ""
    assert "--key must not be empty" in one_line_error(
        run_cli(["unblock", "--type", "test.shape.execute", "--key", ""], env))
    assert "--type must not be empty" in one_line_error(run_cli(["unblock", "--type", ""], env))
    assert "not in the range" in one_line_error(run_cli(["unblock", str(2**63)], env))
    for args in (["unblock", "abc"], ["get", "abc"], ["worker", "--slots", "abc"]):
        assert one_line_error(run_cli(args, env)).endswith(
            f"'abc' is not a valid integer. (see `cronjobs {args[0]} --help`)"), args


def test_limits_lists_a_type_with_a_limit_key_alone(make_app):
    """A LIMIT_KEY without CONCURRENCY or RATE_LIMIT limits nothing, but its flood-wait
    blocks are per key: `cronjobs limits` lists it, as `list-handlers` does."""
    from cronjobs import CronJobHandler
    from cronjobs.cli.flow import configured_limits

    class KeyOnlyExecute(CronJobHandler):
        TYPE = "test.keyonly.execute"
        LIMIT_KEY = "acct"

        def handle(self, payload, job):
            return True

    app = make_app()
    app.handlers.register(KeyOnlyExecute.TYPE, KeyOnlyExecute)
    assert {"scope": "type", "name": KeyOnlyExecute.TYPE, "concurrency": None,
            "rate_limit": None, "limit_key": "acct"} in configured_limits(app)
    assert all(row["name"] != "test.shape.execute" for row in configured_limits(app))
