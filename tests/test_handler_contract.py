"""Every return shape of handle() ends the row in the state the table gives."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner

T0 = datetime(2026, 1, 5, 12, 0, 0)
BACKENDS = pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)


def run_shape(app, shape: str, **payload):
    job_id = queue.dispatch("test.shape.execute", {"shape": shape, **payload})
    InlineRunner(Executor(app)).run_id(job_id)
    return job_id, queue.get(job_id)


@BACKENDS
def test_true_completes_without_result(make_app):
    app = make_app(clock=FrozenClock(T0))
    _, row = run_shape(app, "true")
    assert row["status"] == "completed"
    assert row["result_payload"] is None
    assert row["attempts"] == 1
    assert row["finished_at"] == T0


@BACKENDS
@pytest.mark.parametrize("attr", ["error", "gateway_error", "message"])
def test_false_retries_with_backoff_and_error_attribute(make_app, attr):
    app = make_app(clock=FrozenClock(T0))
    _, row = run_shape(app, "false", attr=attr)
    assert row["status"] == "pending"
    assert row["error"] == f"{attr} text"
    assert row["scheduled_at"] == T0 + timedelta(minutes=2)  # 2^1 minutes before attempt 2


@BACKENDS
def test_false_then_failed_after_max_attempts(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    job_id = queue.dispatch("test.shape.execute", {"shape": "false"})
    delays = []
    for _ in range(3):
        before = clock.now()
        InlineRunner(Executor(app)).run_id(job_id)
        row = queue.get(job_id)
        if row["status"] == "pending":
            delays.append(row["scheduled_at"] - before)
            clock.set(row["scheduled_at"])
    assert delays == [timedelta(minutes=2), timedelta(minutes=4)]
    assert row["status"] == "failed"
    assert row["attempts"] == 3
    assert row["error"] == "handler returned False"


@BACKENDS
def test_exception_retries_and_goes_to_process_log(make_app):
    app = make_app(clock=FrozenClock(T0))
    _, row = run_shape(app, "raise")
    assert row["status"] == "pending"
    assert row["error"] == "ValueError: boom from handler"
    assert "ValueError: boom from handler" in row["process_logs"]


@BACKENDS
def test_dict_success_stores_result(make_app):
    app = make_app(clock=FrozenClock(T0))
    _, row = run_shape(app, "dict_ok")
    assert row["status"] == "completed"
    assert row["result_payload"] == '{"answer": 42}'


@BACKENDS
def test_dict_failure_is_retried_like_false(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "dict_fail"}, max_attempts=1)
    InlineRunner(Executor(app)).run_id(job_id)
    row = queue.get(job_id)
    assert row["status"] == "failed"
    assert '"reason": "service-gone"' in row["result_payload"]


@BACKENDS
def test_dict_failure_with_retry_false_fails_at_once_with_attempts_left(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id, row = run_shape(app, "dict_fail_no_retry", path=5)
    assert (row["status"], row["attempts"], row["max_attempts"]) == ("failed", 1, 3)
    assert row["error"] == "bad input: path is not a folder"
    assert row["result_payload"] == '{"path": 5}'
    assert "not retried" in row["process_logs"]


@BACKENDS
def test_cancelled_without_children_is_deleted(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id, row = run_shape(app, "cancel")
    assert row is None


@BACKENDS
def test_cancelled_with_children_is_kept(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id, row = run_shape(app, "cancel", children=True)
    assert row["status"] == "cancelled"
    assert '"reason": "no-targets"' in row["result_payload"]
    from cronjobs import store

    with app.engine.connect() as conn:
        assert store.count_children(conn, job_id) == 1


@BACKENDS
def test_retry_later_does_not_use_an_attempt(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "retry_later", "delay": 90},
                            max_attempts=1)
    for _ in range(3):
        InlineRunner(Executor(app)).run_id(job_id)
    row = queue.get(job_id)
    assert row["status"] == "pending"
    assert row["attempts"] == 0
    assert row["scheduled_at"] == T0 + timedelta(seconds=90)
    assert "rate limited" in row["process_logs"]


@BACKENDS
@pytest.mark.parametrize("shape,shown", [("none", "NoneType None"), ("string", "str 'done'"),
                                         ("list", "list [1, 2]")])
def test_other_returns_fail_without_retry(make_app, shape, shown):
    app = make_app(clock=FrozenClock(T0))
    _, row = run_shape(app, shape)
    assert row["status"] == "failed"
    assert row["attempts"] == 1 and row["max_attempts"] == 3
    assert f"handler returned {shown}" in row["error"]
    assert f"handler returned {shown}" in row["process_logs"]


@BACKENDS
def test_unregistered_type_fails_the_job_not_the_worker(make_app):
    """With no grace period a row of an unknown type fails at once (the default grace is
    in tests/test_rows_without_a_handler.py)."""
    app = make_app(clock=FrozenClock(T0), unknown_type_grace_seconds=0)
    job_id = queue.dispatch("nobody.home.execute", {}, known_type=False)
    report = InlineRunner(Executor(app)).run_next("default")
    assert report.id == job_id
    row = queue.get(job_id)
    assert row["status"] == "failed"
    assert row["error"].startswith("no handler registered for type 'nobody.home.execute'")


@BACKENDS
def test_backoff_is_capped(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, retry_backoff_cap_minutes=5)
    job_id = queue.dispatch("test.shape.execute", {"shape": "false"}, max_attempts=10)
    gaps = []
    for _ in range(4):
        before = clock.now()
        InlineRunner(Executor(app)).run_id(job_id)
        row = queue.get(job_id)
        gaps.append((row["scheduled_at"] - before).total_seconds() / 60)
        clock.set(row["scheduled_at"])
    assert gaps == [2, 4, 5, 5]


@BACKENDS
def test_max_attempts_per_row_overrides_class(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "raise"}, max_attempts=1)
    InlineRunner(Executor(app)).run_id(job_id)
    assert queue.get(job_id)["status"] == "failed"


@BACKENDS
def test_destructive_handler_does_not_run_while_its_task_is_disabled(make_app):
    from cronjobs import CronJobHandler
    from cronjobs.schedule.tasks import set_enabled

    calls = []

    class PurgeExecute(CronJobHandler):
        TYPE = "test.purge.execute"
        DESTRUCTIVE = True

        def handle(self, payload, job):
            calls.append(job.id)
            return True

    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(PurgeExecute.TYPE, PurgeExecute)
    first = queue.dispatch("test.purge.execute", {})
    assert InlineRunner(Executor(app)).run_id(first).status == "deleted"  # cancelled, childless
    set_enabled("test-purge", True)
    second = queue.dispatch("test.purge.execute", {})
    assert InlineRunner(Executor(app)).run_id(second).status == "completed"
    assert calls == [second]


@BACKENDS
def test_process_runs_a_row_here_and_now(make_app):
    from cronjobs.errors import JobNotFound, JobStateError

    app = make_app(clock=FrozenClock(T0))
    ok = queue.dispatch("test.shape.execute", {"shape": "true"})
    assert queue.process(ok) is True
    with pytest.raises(JobStateError, match=f"job {ok} is completed, not pending"):
        queue.process(ok)
    with pytest.raises(JobNotFound):
        queue.process(10**9)
    bad = queue.dispatch("test.shape.execute", {"shape": "false"})
    assert queue.process({"id": bad, "status": "pending"}) is False
    claimed_id = queue.dispatch("test.shape.execute", {"shape": "dict_ok"})
    with app.engine.begin() as conn:
        [claimed] = Executor(app, "me:1").claim_rows(conn, T0, job_id=claimed_id).rows
    assert queue.process(claimed) is True
    assert queue.get(claimed_id)["result_payload"] == '{"answer": 42}'


@BACKENDS
@pytest.mark.parametrize("value,error", [
    ({"success": True, "status": "exploded"}, "handler returned unknown status 'exploded'"),
    ({"success": True, "result": [1, 2]}, "handler returned a result of type list"),
    ({"success": True, "result": {"x": float("nan")}}, "could not record the outcome (ValueError"),
    ({"success": True, "result": {"x": "y" * 1_000_001}},
     "result is 1,000,010 bytes of JSON; the limit is 1,000,000 bytes"),
])
def test_odd_results_fail_the_row_with_a_reason(make_app, value, error):
    from cronjobs import CronJobHandler

    class OddExecute(CronJobHandler):
        TYPE = "test.odd.execute"

        def handle(self, payload, job):
            return value

    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(OddExecute.TYPE, OddExecute)
    job_id = queue.dispatch("test.odd.execute", {})
    InlineRunner(Executor(app)).run_id(job_id)
    row = queue.get(job_id)
    assert row["status"] == "failed" and error in row["error"], row["error"]


@BACKENDS
@pytest.mark.parametrize("raise_", [SystemExit(3), KeyboardInterrupt()])
def test_base_exceptions_from_a_handler_fail_the_row_not_the_worker(make_app, raise_):
    from cronjobs import CronJobHandler

    class ExitExecute(CronJobHandler):
        TYPE = "test.exit.execute"

        def handle(self, payload, job):
            raise raise_

    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(ExitExecute.TYPE, ExitExecute)
    job_id = queue.dispatch("test.exit.execute", {}, max_attempts=1)
    InlineRunner(Executor(app)).run_id(job_id)
    row = queue.get(job_id)
    assert row["status"] == "failed" and row["error"].startswith(type(raise_).__name__)


def test_retry_later_delay_is_bounded():
    from cronjobs import RetryLater

    with pytest.raises(ValueError, match="one year"):
        RetryLater(10**12)
    with pytest.raises(ValueError, match="one year"):
        RetryLater(-1)


@BACKENDS
def test_a_completed_retry_clears_the_old_error(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    job_id = queue.dispatch("test.shape.execute", {"shape": "raise"})
    InlineRunner(Executor(app)).run_id(job_id)
    assert queue.get(job_id)["error"]
    with app.engine.begin() as conn:
        from cronjobs.store.models import cronjob_queue as q

        conn.execute(q.update().where(q.c.id == job_id).values(payload='{"shape": "true"}'))
    clock.advance(120)
    InlineRunner(Executor(app)).run_id(job_id)
    row = queue.get(job_id)
    assert row["status"] == "completed" and row["error"] is None
    assert "ValueError: boom from handler" in row["process_logs"], "history stays in the log"
