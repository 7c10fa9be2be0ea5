"""What a row becomes after each return shape and each outcome: `from_return`,
`from_exception` and `next_state` as pure tables, no database, no clock but a fixed `now`."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from cronjobs.handler import CronJobHandler, Job, RetryLater
from cronjobs.job.outcome import (
    KINDS,
    Outcome,
    Policy,
    from_exception,
    from_return,
    next_state,
    no_handler,
    not_started,
)
from cronjobs.status import Reason, Status

NOW = datetime(2026, 3, 1, 12, 0, 0)
POLICY = Policy(backoff_cap_minutes=60, unknown_type_grace_seconds=900, worker_id="host:7")


def job(attempts: int = 1, max_attempts: int = 3, error: str | None = None) -> Job:
    return Job.from_row({"id": 12, "type": "t.x.execute", "queue": "default",
                         "status": "running", "payload": "{}", "attempts": attempts,
                         "max_attempts": max_attempts, "error": error})


class Handler(CronJobHandler):
    TYPE = "t.x.execute"


def handler(**attrs) -> Handler:
    made = Handler()
    for name, value in attrs.items():
        setattr(made, name, value)
    return made


DEEP: dict = {}
for _ in range(101):
    DEEP = {"d": DEEP}

# (return value, handler attributes) -> (kind, result, error, reason)
RETURNS = [
    (True, {}, ("completed", None, None, None)),
    (False, {}, ("failed", None, "handler returned False", None)),
    (False, {"error": "quota gone"}, ("failed", None, "quota gone", None)),
    (False, {"gateway_error": "HTTP 502"}, ("failed", None, "HTTP 502", None)),
    (False, {"message": "later"}, ("failed", None, "later", None)),
    ({"success": True}, {}, ("completed", None, None, None)),
    ({"success": True, "result": {"n": 1}}, {}, ("completed", {"n": 1}, None, None)),
    ({"success": True, "status": "completed", "result": {"n": 1}}, {},
     ("completed", {"n": 1}, None, None)),
    ({"success": True, "status": "cancelled", "result": {"reason": "none"}}, {},
     ("cancelled", {"reason": "none"}, None, None)),
    ({"success": False}, {}, ("failed", None, "handler reported failure", None)),
    ({"success": False, "result": {"reason": "gone"}}, {},
     ("failed", {"reason": "gone"}, "handler reported failure (gone)", None)),
    ({"success": False, "error": "bad"}, {}, ("failed", None, "bad", None)),
    ({"success": False, "message": "bad msg"}, {}, ("failed", None, "bad msg", None)),
    ({"success": False}, {"error": "attr text"}, ("failed", None, "attr text", None)),
    ({"success": False, "retry": False, "error": "wrong input"}, {},
     ("fatal", None, "wrong input", None)),
    ({"success": True, "result": [1, 2]}, {},
     ("fatal", None, "handler returned a result of type list; expected a dict",
      Reason.INVALID_RETURN)),
    ({"success": True, "status": "weird"}, {},
     ("fatal", None, "handler returned unknown status 'weird'; expected 'cancelled' or none",
      Reason.INVALID_RETURN)),
    ({"success": True, "result": DEEP}, {},
     ("fatal", None, "handler returned a result nested more than 100 levels deep; the limit "
                     "is 100", Reason.UNRECORDABLE_RESULT)),
    (None, {}, ("fatal", None, "handler returned NoneType None; expected True, False or "
                               "{'success': bool, 'result': {...}}", Reason.INVALID_RETURN)),
    ("yes", {}, ("fatal", None, "handler returned str 'yes'; expected True, False or "
                                "{'success': bool, 'result': {...}}", Reason.INVALID_RETURN)),
    ({"success": "yes"}, {}, ("fatal", None, "handler returned dict {'success': 'yes'}; expected "
                                             "True, False or {'success': bool, 'result': {...}}",
                              Reason.INVALID_RETURN)),
]


@pytest.mark.parametrize(("value", "attrs", "expected"), RETURNS,
                         ids=[f"{i}-{type(r[0]).__name__}" for i, r in enumerate(RETURNS)])
def test_every_return_shape_becomes_one_outcome(value, attrs, expected):
    got = from_return(value, handler(**attrs))
    assert (got.kind, got.result, got.error, got.reason) == expected


def test_a_long_unexpected_return_is_cut_in_the_error():
    got = from_return("x" * 1000, handler())
    assert got.kind == "fatal" and got.reason == Reason.INVALID_RETURN
    assert "'" + "x" * 199 + "..." in got.error and len(got.error) < 400


def test_exceptions_fail_the_run_and_retry_later_gives_the_attempt_back():
    failed = from_exception(ValueError("boom"))
    assert (failed.kind, failed.error, failed.log, failed.reason) == (
        "failed", "ValueError: boom", "raised ValueError: boom", None)
    later = from_exception(RetryLater(timedelta(minutes=2), "rate limited"))
    assert (later.kind, later.delay_seconds, later.log, later.error) == (
        "retry_later", 120.0, "retry later in 120 s: rate limited", None)


# (kind, attempts, max_attempts) -> (status, attempts written, scheduled_at, finished_at, delay)
STATES = [
    ("completed", 1, 3, (Status.COMPLETED, None, None, NOW, 0.0)),
    ("completed", 3, 3, (Status.COMPLETED, None, None, NOW, 0.0)),
    ("cancelled", 1, 3, (Status.CANCELLED, None, None, NOW, 0.0)),
    ("failed", 1, 3, (Status.PENDING, None, NOW + timedelta(minutes=2), None, 120.0)),
    ("failed", 2, 3, (Status.PENDING, None, NOW + timedelta(minutes=4), None, 240.0)),
    ("failed", 3, 3, (Status.FAILED, None, None, NOW, 0.0)),
    ("failed", 7, 9, (Status.PENDING, None, NOW + timedelta(minutes=60), None, 3600.0)),
    ("fatal", 1, 3, (Status.FAILED, None, None, NOW, 0.0)),
    ("fatal", 3, 3, (Status.FAILED, None, None, NOW, 0.0)),
    ("retry_later", 1, 3, (Status.PENDING, 0, NOW + timedelta(seconds=30), None, 30.0)),
    ("retry_later", 3, 3, (Status.PENDING, 2, NOW + timedelta(seconds=30), None, 30.0)),
    ("cut_off", 1, 3, (Status.PENDING, 0, None, None, 0.0)),
    ("cut_off", 3, 3, (Status.PENDING, 2, None, None, 0.0)),
]


@pytest.mark.parametrize(("kind", "attempts", "max_attempts", "expected"), STATES,
                         ids=[f"{k}-{a}of{m}" for k, a, m, _ in STATES])
def test_every_kind_and_attempt_count_gives_one_next_state(kind, attempts, max_attempts,
                                                           expected):
    outcome = Outcome(kind, delay_seconds=30 if kind == "retry_later" else 0)
    move = next_state(job(attempts, max_attempts), outcome, NOW, POLICY)
    status, written_attempts, scheduled_at, finished_at, delay = expected
    assert move.status == status and move.values["status"] == status
    assert move.values.get("attempts") == written_attempts
    assert move.values.get("scheduled_at") == scheduled_at
    assert move.values.get("finished_at") == finished_at
    assert move.delay_seconds == delay
    assert move.values["locked_until"] is None and move.values["updated_at"] == NOW


def test_the_values_carry_the_result_the_error_and_the_reason():
    done = next_state(job(), Outcome("completed", result={"n": 2 ** 60}), NOW, POLICY)
    assert json.loads(done.values["result_payload"]) == {"n": 2 ** 60}
    assert done.values["error"] is None and done.values["outcome_reason"] is None
    failed = next_state(job(3), Outcome("failed", error="x", reason=Reason.PROCESS_DIED),
                        NOW, POLICY)
    assert (failed.values["error"], failed.values["outcome_reason"]) == ("x", "process_died")
    assert type(failed.values["outcome_reason"]) is str  # bound as a plain string


def test_a_run_given_back_keeps_the_last_counted_attempts_error():
    """A row claimed ahead and given back before it started (or cut off by a stopping
    worker) did not use its attempt: the error of the attempt before stays on the row,
    for the handler's next run (`job.error`) and the dashboard."""
    back = next_state(job(2, error="boom"), not_started("claimed ahead: given back"), NOW,
                      POLICY)
    assert back.status == Status.PENDING and back.values["attempts"] == 1
    assert "error" not in back.values
    assert back.values["outcome_reason"] == "not_started"


@pytest.mark.parametrize("result", [{"x": float("nan")}, {"big": "x" * 1_000_001}, DEEP])
def test_a_result_that_cannot_be_stored_raises_value_error(result):
    with pytest.raises(ValueError, match="result is|Out of range float"):
        next_state(job(), Outcome("completed", result=result), NOW, POLICY)


def test_an_unknown_kind_is_refused():
    assert set(KINDS) == {"completed", "failed", "fatal", "cancelled", "retry_later", "cut_off",
                          "no_handler"}
    with pytest.raises(ValueError, match="outcome kind must be one of .*, got 'done'"):
        next_state(job(), Outcome("done"), NOW, POLICY)


def test_no_handler_puts_the_row_back_then_fails_it_after_the_grace():
    first = next_state(job(1), no_handler("t.x.execute"), NOW, POLICY)
    assert (first.status, first.values["attempts"], first.delay_seconds) == (Status.PENDING, 0, 5)
    assert first.values["error"] == ("no handler registered for type 't.x.execute' on worker "
                                     "host:7; waiting since 2026-03-01T12:00:00 for a worker "
                                     "that knows it")
    assert first.values["outcome_reason"] == Reason.NO_HANDLER
    later = NOW + timedelta(seconds=100)
    second = next_state(job(1, error=first.values["error"]), no_handler("t.x.execute"), later,
                        POLICY)
    assert (second.status, second.delay_seconds) == (Status.PENDING, 100)
    end = NOW + timedelta(seconds=900)
    last = next_state(job(1, error=first.values["error"]), no_handler("t.x.execute"), end, POLICY)
    assert (last.status, last.values["finished_at"]) == (Status.FAILED, end)
    assert last.values["error"] == ("no handler registered for type 't.x.execute' (no worker "
                                    "that knows it took the row within 900 s)")
