"""Every outcome the worker decides is built by one named constructor with a machine-readable
reason; the reason is written with the outcome (`outcome_reason`), cleared by a later clean
run, counted by `/metrics` (a timeout by its reason, never by its text) and shown on the Job
page."""

from __future__ import annotations

from datetime import datetime

import pytest

from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock
from cronjobs.handler import Job
from cronjobs.job import outcome
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.schedule.tasks import set_enabled
from cronjobs.status import Reason, family
from cronjobs.testing import drain
from dashboard_helpers import TOKEN, add_row, login, row, web_client
from test_metrics_and_ops import scrape

T0 = datetime(2026, 6, 1, 12, 0, 0)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

# constructor call -> (kind, error, process-log line, reason)
MADE = [
    (lambda: outcome.timeout(5, Reason.TIMEOUT_ALARM),
     ("failed", "timeout after 5 s (MAX_RUNTIME); job stopped, its process replaced", None,
      Reason.TIMEOUT_ALARM)),
    (lambda: outcome.timeout(2.5, Reason.TIMEOUT_KILLED),
     ("failed", "timeout after 2.5 s (MAX_RUNTIME); job process killed", None,
      Reason.TIMEOUT_KILLED)),
    (lambda: outcome.timeout(2, Reason.TIMEOUT_ABANDONED),
     ("failed", "timeout after 2 s (MAX_RUNTIME); thread job abandoned, worker recycling", None,
      Reason.TIMEOUT_ABANDONED)),
    (lambda: outcome.process_died(3),
     ("failed", "job process died (exit code 3)", None, Reason.PROCESS_DIED)),
    (lambda: outcome.process_died(-9, "pipe closed"),
     ("failed", "job process died (exit code -9): pipe closed", None, Reason.PROCESS_DIED)),
    (outcome.cut_off_by_shutdown,
     ("cut_off", None, "cut off by worker shutdown; attempt not used", Reason.CUT_OFF_SHUTDOWN)),
    (lambda: outcome.cut_off_by_recycle("memory-limit 300 MB reached (412 MB)"),
     ("failed", "cut off when the worker recycled (memory-limit 300 MB reached (412 MB)); "
                "attempt used", None, Reason.CUT_OFF_RECYCLE)),
    (lambda: outcome.not_started("job process had died before the job was sent (EPIPE)"),
     ("cut_off", None, "job process had died before the job was sent (EPIPE); attempt not used",
      Reason.NOT_STARTED)),
    (outcome.disabled,
     ("cancelled", None, "task is disabled (destructive handler): not run", Reason.DISABLED)),
    (lambda: outcome.unrecordable(ValueError("result is 2,000,000 bytes of JSON")),
     ("fatal", "could not record the outcome (ValueError: result is 2,000,000 bytes of JSON)",
      None, Reason.UNRECORDABLE_RESULT)),
    (lambda: outcome.refused(RuntimeError("Data too long")),
     ("fatal", "could not record the outcome (RuntimeError: Data too long)", None,
      Reason.UNRECORDABLE_REFUSED)),
    (lambda: outcome.unsendable(TypeError("cannot pickle '_thread.lock' object")),
     ("fatal", "the job's outcome could not be sent to the worker (TypeError: cannot pickle "
               "'_thread.lock' object)", None, Reason.UNRECORDABLE_RESULT)),
    (lambda: outcome.no_handler("a.b.execute"),
     ("no_handler", "no handler registered for type 'a.b.execute'", None, Reason.NO_HANDLER)),
    (lambda: outcome.unreadable(RecursionError("maximum recursion depth exceeded")),
     ("fatal", "the job could not be prepared to run (RecursionError: maximum recursion depth "
               "exceeded)", None, Reason.UNREADABLE_ROW)),
    (lambda: outcome.unreadable_answer(EOFError("Ran out of input")),
     ("fatal", "the job process's answer could not be read (EOFError: Ran out of input)", None,
      Reason.UNREADABLE_ANSWER)),
    (lambda: outcome.wrong_answer(7, 9),
     ("failed", "job process answered for job 7 while running job 9", None,
      Reason.UNREADABLE_ANSWER)),
    (lambda: outcome.stopped("dashboard"),
     ("fatal", "stopped by an operator (dashboard)", None, Reason.STOPPED)),
    (lambda: outcome.invalid_return("handler returned int 3"),
     ("fatal", "handler returned int 3", None, Reason.INVALID_RETURN)),
]


@pytest.mark.parametrize(("make", "expected"), MADE, ids=[e[3].value + f"-{i}"
                                                          for i, (_, e) in enumerate(MADE)])
def test_each_worker_outcome_has_its_constructor_and_reason(make, expected):
    made = make()
    kind, error, log, reason = expected
    assert (made.kind, made.error, made.reason) == (kind, error, reason)
    assert made.log == (log if log is not None else error)


def test_timeouts_name_how_they_were_stopped_and_share_a_family():
    with pytest.raises(ValueError, match="a timeout is stopped by timeout.alarm, "
                                         "timeout.killed, timeout.abandoned, got 'process_died'"):
        outcome.timeout(5, Reason.PROCESS_DIED)
    assert {family(r) for r in Reason if r.startswith("timeout")} == {"timeout"}
    assert family("cut_off.recycle") == "cut_off" and family("disabled") == "disabled"
    assert family("some.future_reason") == "some" and family(None) is None
    assert max(len(r) for r in Reason) <= 32  # the column's width


def _claimed(app, job_id: int) -> Job:
    with app.engine.begin() as conn:
        claimed = Executor(app, "w:1").claim_rows(conn, app.clock.now(), job_id=job_id).rows
    return Job.from_row(claimed[0])


def test_a_timeout_is_stored_with_its_reason_and_counted_by_it_not_by_its_text(make_app):
    app = make_app(clock=FrozenClock(T0), dashboard_token=TOKEN)
    client = web_client(app)
    scrape(client)  # the counters start here
    timed = queue.dispatch("test.slow.execute", {}, max_attempts=1)
    report = InlineRunner(Executor(app)).finish(_claimed(app, timed),
                                  outcome.timeout(8, Reason.TIMEOUT_KILLED), 8000.0)
    assert report.status == "failed"
    stored = row(app, timed)
    assert (stored["outcome_reason"], stored["error"]) == (
        "timeout.killed", "timeout after 8 s (MAX_RUNTIME); job process killed")
    # A handler's own failure whose text happens to read like a timeout is no timeout.
    add_row(app, type="test.slow.execute", status="failed", attempts=1, started_at=T0,
            finished_at=T0, error="timeout after 3 s talking to the gateway")
    after = scrape(client)
    assert after[("cronjobs_job_timeouts_total", (("type", "test.slow.execute"),))] == 1
    assert after[("cronjobs_jobs_finished_total", (("status", "failed"),
                                                   ("type", "test.slow.execute")))] == 2


def test_a_later_clean_run_clears_the_reason(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    job_id = queue.dispatch("test.later.execute", {}, known_type=False)
    drain(app)
    assert row(app, job_id)["outcome_reason"] == "no_handler"
    assert row(app, job_id)["status"] == "pending"

    class LaterExecute(CronJobHandler):
        TYPE = "test.later.execute"

        def handle(self, payload, job):
            return True

    app.handlers.register(LaterExecute.TYPE, LaterExecute)
    clock.advance(10)
    assert drain(app).statuses() == {job_id: "completed"}
    assert (row(app, job_id)["outcome_reason"], row(app, job_id)["error"]) == (None, None)


@SQLITE
def test_the_single_row_path_stores_the_reasons_it_decides(make_app):
    class PurgeExecute(CronJobHandler):
        TYPE = "test.purge.execute"
        DESTRUCTIVE = True

        def handle(self, payload, job):
            return {"success": True, "result": {"x": "y" * 1_000_001}}

    class OddExecute(CronJobHandler):
        TYPE = "test.odd.execute"

        def handle(self, payload, job):
            return 3

    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(PurgeExecute.TYPE, PurgeExecute)
    app.handlers.register(OddExecute.TYPE, OddExecute)
    off = queue.dispatch(PurgeExecute.TYPE, {}, max_attempts=1)
    odd = queue.dispatch(OddExecute.TYPE, {}, max_attempts=1)
    ok = queue.dispatch("test.shape.execute", {"shape": "true"})
    child = queue.dispatch(PurgeExecute.TYPE, {}, parent_id=off, max_attempts=1)
    assert queue.process(off) is False and queue.process(odd) is False
    assert queue.process(ok) is True
    set_enabled("test-purge", True)
    assert queue.process(child) is False  # runs now: its result is too big to store
    assert [row(app, i)["outcome_reason"] for i in (off, odd, ok, child)] == [
        "disabled", "invalid_return", None, "unrecordable.result"]
    assert row(app, child)["error"].startswith("could not record the outcome (ValueError: "
                                               "result is 1,000,010 bytes of JSON")


@SQLITE
def test_the_job_page_shows_the_reason_in_english_and_turkish(make_app):
    app = make_app(dashboard_token=TOKEN)
    job_id = add_row(app, status="failed", error="timeout after 2 s (MAX_RUNTIME); job process "
                     "killed", outcome_reason="timeout.killed", finished_at=T0)
    plain = add_row(app, status="completed", finished_at=T0)
    client = web_client(app)
    login(client)
    page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert ('<tr><th>Outcome reason</th><td><code class="reason">timeout.killed</code></td></tr>'
            in page)
    assert "Outcome reason" not in client.get(f"/jobs/{plain}").get_data(as_text=True)
    turkish = client.get(f"/jobs/{job_id}?lang=tr").get_data(as_text=True)
    assert "<th>Sonuç nedeni</th>" in turkish
    api = client.get(f"/api/jobs/{job_id}").get_json()
    assert api["outcome_reason"] == "timeout.killed"
