"""One bad row fails alone and the worker goes on; a worker whose loop cannot go on exits
non-zero instead of staying up looking alive; payloads and results nest at most 100 levels."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from conftest import REDIS, cli_env, run_cli
from cronjobs import limits, queue
from cronjobs.errors import InvalidJob
from cronjobs.job import dispatching
from cronjobs.store.models import cronjob_queue
from cronjobs.testing import drain
from test_worker_e2e import _tail, wait_for, worker

SHAPE = "test.shape.execute"


def nested(depth: int) -> dict:
    """A dict whose objects nest `depth` levels (`{}` is 1)."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"d": value}
    return value


def deep_json(depth: int) -> str:
    """The JSON text of `nested(depth)`, built without recursion."""
    return '{"d": ' * (depth - 1) + "{}" + "}" * (depth - 1)


def insert_raw(app, payload_text: str, priority: int = 5) -> int:
    """A pending row written with plain SQL, as an older version or another program could
    have stored it (dispatch refuses such payloads now)."""
    now = app.clock.now()
    with app.engine.begin() as conn:
        result = conn.execute(cronjob_queue.insert().values(
            type=SHAPE, queue="default", status="pending", priority=priority,
            payload=payload_text, attempts=0, max_attempts=3, created_at=now, updated_at=now))
        return result.inserted_primary_key[0]


def row(app, job_id: int) -> dict:
    return queue.get(job_id, ["status", "error", "attempts", "result_payload"], app=app)


# -- the limit at dispatch -----------------------------------------------------------------

def test_json_depth_counts_levels_without_recursing():
    assert limits.json_depth(5) == 0
    assert limits.json_depth({}) == 1
    assert limits.json_depth({"a": [1, {"b": []}]}) == 4
    assert limits.json_depth(nested(100)) == 100
    # Far deeper than Python's recursion limit: measured, and the walk stops early.
    assert limits.json_depth(json.loads(deep_json(900)), stop_after=100) == 101
    very_deep: list = []
    for _ in range(50_000):
        very_deep = [very_deep]
    assert limits.json_depth(very_deep) == 101


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_dispatch_refuses_payloads_nested_over_the_limit(make_app):
    app = make_app()
    assert queue.get(queue.dispatch(SHAPE, {"shape": "true", "n": nested(99)}, app=app),
                     ["id"], app=app)
    for depth in (101, 990, 10_000):
        payload = {"shape": "true", "n": nested(depth - 1)}
        with pytest.raises(InvalidJob, match="payload is nested more than 100 levels deep"):
            queue.dispatch(SHAPE, payload, app=app)
        with pytest.raises(InvalidJob, match="nested more than 100"):
            queue.dispatch_many([{"type": SHAPE, "payload": {"shape": "true"}},
                                 {"type": SHAPE, "payload": payload}], app=app)
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)).scalar() == 1


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_cli_dispatch_of_deep_json_is_one_line_and_exit_2(make_app, db_url):
    make_app()
    env = cli_env(db_url)
    for depth in (101, 990, 15_000):  # 15,000 levels: ~100 KB, one argument
        out = run_cli(["dispatch", SHAPE, "--payload", deep_json(depth)], env)
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), out.stderr
        assert "nested more than 100 levels deep" in lines[0], out.stderr
        assert "Traceback" not in out.stderr


# -- one bad row, in this process ----------------------------------------------------------

@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_an_undecodable_row_fails_alone_in_drain_and_process(make_app):
    app = make_app()
    before = queue.dispatch(SHAPE, {"shape": "true"}, priority=9, app=app)
    poison = insert_raw(app, deep_json(990), priority=1)
    broken = insert_raw(app, '{"shape": "tru', priority=2)
    # JSON, but not an object: a handler's payload is a dict (job.payload.get would raise
    # in the worker's own code, not the handler's, and stop its loop).
    not_objects = [insert_raw(app, text, priority=3) for text in ('[1, 2]', '"s"', 'null')]
    after = queue.dispatch(SHAPE, {"shape": "true"}, priority=9, app=app)
    report = drain(app)
    assert report.statuses() == {poison: "failed", broken: "failed", before: "completed",
                                 after: "completed", **dict.fromkeys(not_objects, "failed")}
    for job_id, why in ((poison, "RecursionError"), (broken, "JSONDecodeError"),
                        *((j, "ValueError: payload is a JSON") for j in not_objects)):
        failed = row(app, job_id)
        assert failed["attempts"] == 1, "not retried: the stored row cannot change"
        assert failed["error"].startswith("the job could not be prepared to run (" + why), failed
    again = insert_raw(app, deep_json(990))
    assert queue.process(again, app=app) is False
    assert row(app, again)["status"] == "failed"


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_results_nested_over_the_limit_fail_the_run_not_retried(make_app):
    app = make_app()
    ok = queue.dispatch(SHAPE, {"shape": "deep_result", "depth": 100}, app=app)
    deep = queue.dispatch(SHAPE, {"shape": "deep_result", "depth": 101}, app=app)
    very = queue.dispatch(SHAPE, {"shape": "deep_result", "depth": 5000}, app=app)
    assert drain(app).statuses() == {ok: "completed", deep: "failed", very: "failed"}
    assert limits.json_depth(json.loads(row(app, ok)["result_payload"])) == 100
    for job_id in (deep, very):
        failed = row(app, job_id)
        assert failed["attempts"] == 1 and failed["result_payload"] is None
        assert "result nested more than 100 levels deep" in failed["error"], failed


# -- one bad row, in a real worker ---------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["handler", "process"])
@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_a_worker_fails_poison_rows_and_goes_on(make_app, db_url, namespace, tmp_path, isolation):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    poison = insert_raw(app, deep_json(990), priority=1)
    a_list = insert_raw(app, "[1, 2]", priority=1)
    normal = [queue.dispatch(SHAPE, {"shape": "true"}, priority=2, app=app) for _ in range(5)]
    deep_result = queue.dispatch(SHAPE, {"shape": "deep_result", "depth": 900}, app=app)
    unpicklable = queue.dispatch(SHAPE, {"shape": "unpicklable"}, app=app)
    with worker(db_url, namespace, log, threads=2, isolation=isolation) as proc:
        wait_for(lambda: all(row(app, j)["status"] in ("completed", "failed")
                             for j in [poison, a_list, deep_result, unpicklable, *normal]),
                 60, "every row to end", proc, log)
        assert row(app, poison)["status"] == "failed"
        assert "could not be prepared to run (RecursionError" in row(app, poison)["error"]
        assert row(app, a_list)["status"] == "failed"
        assert "payload is a JSON list, not an object" in row(app, a_list)["error"]
        assert row(app, deep_result)["status"] == "failed"
        assert "nested more than 100 levels" in row(app, deep_result)["error"]
        odd = row(app, unpicklable)
        assert odd["status"] == "failed" and "could not be sent to the worker" in odd["error"]
        assert [row(app, j)["status"] for j in normal] == ["completed"] * 5
        later = [queue.dispatch(SHAPE, {"shape": "true"}, app=app) for _ in range(5)]
        wait_for(lambda: all(row(app, j)["status"] == "completed" for j in later), 30,
                 "rows dispatched after the poison rows", proc, log)
        assert proc.poll() is None, "the worker is still up"
    assert "job loop failed" not in _tail(log, 100_000)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_a_worker_whose_claim_is_refused_exits_non_zero(make_app, db_url, namespace, tmp_path):
    """The loop itself cannot go on (the job table was renamed under it): the process
    exits with status 1 and removes its heartbeat, so a supervisor starts a new one."""
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    cmd = [sys.executable, "-m", "cronjobs", "worker", "--queues", "default", "--threads", "2"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=cli_env(db_url, namespace, broker_url=REDIS),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        first = queue.dispatch(SHAPE, {"shape": "true"}, app=app)
        wait_for(lambda: row(app, first)["status"] == "completed", 60, "the first row", proc, log)
        with app.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE cronjob_queue RENAME TO cronjob_queue_moved")
        dispatching.send(app, first, "default")  # rings the worker: its claim is refused
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.returncode == 1, f"exit {proc.returncode}:\n{_tail(log)}"
        assert "the worker's job loop failed; the worker exits with status 1" in _tail(log, 100_000)
        with app.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT COUNT(*) FROM cronjob_worker").scalar() == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
