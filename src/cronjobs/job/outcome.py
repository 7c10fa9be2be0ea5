"""What a run's outcome does to its row: the state machine of a job row in one place.

`from_return` / `from_exception` turn what `handle()` returned or raised into an
`Outcome`; every outcome the worker decides itself is built by a named constructor here
(`timeout`, `stopped`, `process_died`, `cut_off_by_shutdown`, `cut_off_by_recycle`,
`not_started`, `disabled`, `unrecordable`, `refused`, `unsendable`, `no_handler`,
`unreadable`, `unreadable_answer`, `wrong_answer`), each with its machine-readable
`Reason`, written to the row's `outcome_reason`. `next_state(job, outcome, now, policy)`
is the pure function that decides the row's next state (completed, retry at T, failed,
cancelled, back to pending) and the values to write. Texts are cut to their limits here
(`cronjobs.limits`), before they cross the pipe from a job process or reach the database.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .. import limits
from ..handler import CronJobHandler, Job, RetryLater
from ..status import Reason, Status
from . import failures

NO_HANDLER = "no handler registered for type"
KINDS = ("completed", "failed", "fatal", "cancelled", "retry_later", "cut_off", "no_handler")
_FINAL_OF_KIND = {"completed": Status.COMPLETED, "cancelled": Status.CANCELLED,
                  "failed": Status.FAILED, "fatal": Status.FAILED}
_SINCE = re.compile(r"waiting since (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


@dataclass(frozen=True)
class Outcome:
    """What to do with a row after its handler ran.

    Attributes:
        kind: `completed`; `failed` (retried with backoff while attempts remain); `fatal`
            (failed, not retried); `cancelled`; `retry_later` (no attempt used);
            `cut_off` (the worker stopped before the job ended: no attempt used);
            `no_handler` (this worker does not know the type: put back for a worker that
            does, failed after the grace period).
        result: the `result` dict to store, or None.
        error: error text for the row, or None.
        delay_seconds: for `retry_later`, seconds to wait.
        log: one line for the process log.
        reason: why, when the worker decided the outcome (a `Reason`, written to
            `outcome_reason`); None for the handler's own outcome.
        block: for `retry_later`, `"key"` or `"type"`: block the row's limit key (or
            its type) for `delay_seconds` too; None: only the row waits.
        block_reason: the text stored with the block (the handler's reason).
        traceback: the handler's traceback (`failures.traceback_text`: the error on the
            first line, within `limits.TRACEBACK_MAX_BYTES`), formatted where it was
            raised; None for an outcome without one.
    """

    kind: str
    result: Any = None
    error: str | None = None
    delay_seconds: float = 0
    log: str = ""
    reason: Reason | None = None
    block: str | None = None
    block_reason: str | None = None
    traceback: str | None = None

    def __post_init__(self) -> None:
        if self.error is not None:
            object.__setattr__(self, "error", limits.cut(self.error, limits.ERROR_MAX_BYTES))
        if self.traceback is not None:
            first, _, rest = self.traceback.partition("\n")
            object.__setattr__(self, "traceback", failures.bounded(first, rest))
        object.__setattr__(self, "log", limits.log_line(self.log))


@dataclass(frozen=True)
class Policy:
    """The settings `next_state` needs.

    Attributes:
        backoff_cap_minutes: cap of the 2^n-minute retry backoff, minutes.
        unknown_type_grace_seconds: how long a row whose type a worker does not know is
            put back before it is failed, seconds.
        worker_id: written into the `no_handler` error text.
    """

    backoff_cap_minutes: float = 60
    unknown_type_grace_seconds: float = 900
    worker_id: str = "?"


@dataclass(frozen=True)
class Transition:
    """The row's next state: `values` to write (without the process log), the new
    `status`, and `delay_seconds` until a `pending` row is due again."""

    values: dict
    status: Status
    delay_seconds: float = 0.0


def from_return(value: Any, handler: CronJobHandler) -> Outcome:
    """Interpret the return value of `handler.handle()`: True, False, or a dict with a
    bool `success` (and optional `result` dict, `status` "cancelled", `error`, `retry`).
    Anything else is an `invalid_return` (failed, not retried)."""
    if value is True:
        return Outcome("completed", log="returned True")
    if value is False:
        error = handler.failure_text() or "handler returned False"
        return Outcome("failed", error=error, log=f"returned False: {error}")
    if isinstance(value, dict) and isinstance(value.get("success"), bool):
        return _from_dict(value, handler)
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    return invalid_return(f"handler returned {type(value).__name__} {shown}; expected True, "
                          f"False or {{'success': bool, 'result': {{...}}}}")


def _from_dict(value: dict, handler: CronJobHandler) -> Outcome:
    result = value.get("result")
    status = value.get("status")
    if result is not None and not isinstance(result, dict):
        return invalid_return(f"handler returned a result of type {type(result).__name__}; "
                              f"expected a dict")
    if result is not None and limits.json_depth(result) > limits.JSON_MAX_DEPTH:
        # Checked here, in the job process: such a result could not cross the pipe
        # (pickle recurses per level) nor be stored.
        error = (f"handler returned a result nested more than {limits.JSON_MAX_DEPTH} "
                 f"levels deep; the limit is {limits.JSON_MAX_DEPTH}")
        return Outcome("fatal", error=error, log=error, reason=Reason.UNRECORDABLE_RESULT)
    if status not in (None, Status.CANCELLED, Status.COMPLETED):
        return invalid_return(f"handler returned unknown status {status!r:.80}; expected "
                              f"'cancelled' or none", result)
    if value["success"]:
        if status == Status.CANCELLED:
            return Outcome("cancelled", result=result, log=_reason("cancelled", result))
        return Outcome("completed", result=result, log=_reason("completed", result))
    error = (value.get("error") or value.get("message") or handler.failure_text()
             or _reason("handler reported failure", result))
    if value.get("retry") is False:  # wrong for good: no retry, whatever the attempts
        return Outcome("fatal", result=result, error=str(error),
                       log=f"failure, not retried: {error}")
    return Outcome("failed", result=result, error=str(error), log=f"failure: {error}")


def from_exception(exc: BaseException) -> Outcome:
    """Interpret an exception raised by `handle()`."""
    if isinstance(exc, RetryLater):
        # What the block holds (the key, or the type of a row without one) is said where
        # the row is known: `finishing.OutcomeWriter.plan`.
        text = f"retry later in {exc.delay_seconds:g} s" + (f": {exc.reason}" if exc.reason else "")
        return Outcome("retry_later", delay_seconds=exc.delay_seconds, log=text,
                       block=exc.block, block_reason=exc.reason)
    error = f"{type(exc).__name__}: {exc}"
    return Outcome("failed", error=error, log=f"raised {error}",
                   traceback=failures.traceback_text(exc, error))


# -- the outcomes the worker decides (each with its Reason) --------------------------------
def _fails(kind: str, error: str, reason: Reason, result: Any = None) -> Outcome:
    return Outcome(kind, result=result, error=error, log=error, reason=reason)


def _exc_text(exc: BaseException, max_chars: int = limits.EXCEPTION_TEXT_MAX_CHARS) -> str:
    return f"{type(exc).__name__}: {str(exc)[:max_chars]}"


def invalid_return(error: str, result: Any = None) -> Outcome:
    """`handle()` returned something it may not (`error` says what): failed, not retried."""
    return _fails("fatal", error, Reason.INVALID_RETURN, result)


TIMEOUT_HOW = {
    Reason.TIMEOUT_ALARM: "job stopped, its process replaced",
    Reason.TIMEOUT_KILLED: "job process killed",
    Reason.TIMEOUT_ABANDONED: "thread job abandoned, worker recycling",
}


def timeout(max_runtime_seconds: float, how: Reason) -> Outcome:
    """A job stopped at its MAX_RUNTIME (seconds): retried with backoff, or failed.

    Args:
        how: what stopped it: `Reason.TIMEOUT_ALARM` (the job process's alarm),
            `TIMEOUT_KILLED` (SIGKILL, no answer after the grace), `TIMEOUT_ABANDONED`
            (a thread job given up; the worker recycles).

    Raises:
        ValueError: `how` is not one of those.
    """
    if how not in TIMEOUT_HOW:
        raise ValueError(f"a timeout is stopped by {', '.join(TIMEOUT_HOW)}, got {str(how)!r}")
    return _fails("failed", f"timeout after {max_runtime_seconds:g} s (MAX_RUNTIME); "
                            f"{TIMEOUT_HOW[how]}", how)


def stopped(who: str) -> Outcome:
    """An operator stopped the running job (`who`: `dashboard`, `cli`): its job process
    was killed (a thread job was given up and the worker recycles). Failed, not retried,
    whatever the attempts left: the operator meant it to end."""
    return _fails("fatal", f"stopped by an operator ({who})", Reason.STOPPED)


def process_died(exit_code: int | None, detail: str = "") -> Outcome:
    """The job process ended during the job (exit code, or None when not known):
    retried with backoff, or failed."""
    return _fails("failed", f"job process died (exit code {exit_code})"
                            + (f": {detail}" if detail else ""), Reason.PROCESS_DIED)


def cut_off_by_shutdown() -> Outcome:
    """A stopping worker (a signal) killed the job: back to `pending`, attempt given back."""
    return Outcome("cut_off", log="cut off by worker shutdown; attempt not used",
                   reason=Reason.CUT_OFF_SHUTDOWN)


def cut_off_by_recycle(recycle_reason: str) -> Outcome:
    """A recycling worker killed the job (`recycle_reason`: "memory-limit 300 MB
    reached"): the attempt is used, so a job that always outlives the limit ends failed."""
    return _fails("failed", f"cut off when the worker recycled ({recycle_reason}); attempt used",
                  Reason.CUT_OFF_RECYCLE)


def not_started(why: str) -> Outcome:
    """The job never started (`why`: its job process had died while idle, the database did
    not answer a read it needs): back to `pending` at once, attempt given back."""
    return Outcome("cut_off", log=f"{why}; attempt not used", reason=Reason.NOT_STARTED)


def disabled() -> Outcome:
    """A destructive handler whose task is switched off: cancelled, not run."""
    return Outcome("cancelled", result={"reason": "disabled"},
                   log="task is disabled (destructive handler): not run", reason=Reason.DISABLED)


def unrecordable(exc: BaseException) -> Outcome:
    """The outcome cannot be stored (`exc`: a result too big, not JSON): failed, not
    retried, naming why."""
    return _fails("fatal", f"could not record the outcome ({type(exc).__name__}: {exc})",
                  Reason.UNRECORDABLE_RESULT)


def refused(exc: BaseException) -> Outcome:
    """The database refused to write the outcome (`exc`): failed, not retried, naming
    the error (written without the values it refused)."""
    return _fails("fatal", f"could not record the outcome ({type(exc).__name__}: {exc})",
                  Reason.UNRECORDABLE_REFUSED)


def unsendable(exc: BaseException) -> Outcome:
    """The job process could not send the outcome to the worker (`exc`: pickle refused
    its result): failed, not retried."""
    return _fails("fatal", f"the job's outcome could not be sent to the worker "
                           f"({_exc_text(exc)})", Reason.UNRECORDABLE_RESULT)


def no_handler(job_type: str) -> Outcome:
    """The outcome of a row whose type this process has no handler for."""
    return _fails("no_handler", f"{NO_HANDLER} {job_type!r}", Reason.NO_HANDLER)


def unreadable(exc: BaseException) -> Outcome:
    """The outcome of a claimed row that cannot be prepared for its handler (a stored
    payload that cannot be decoded, a job that cannot be sent to its job process): it
    fails at once, not retried, naming the error — and the worker goes on."""
    return _fails("fatal", f"the job could not be prepared to run "
                           f"({_exc_text(exc, limits.ROW_EXCEPTION_TEXT_MAX_CHARS)})",
                  Reason.UNREADABLE_ROW)


def unreadable_answer(exc: BaseException) -> Outcome:
    """The job process's answer cannot be read (`exc`, e.g. it cannot be unpickled):
    failed, not retried; the process is trusted no more."""
    return _fails("fatal", f"the job process's answer could not be read ({_exc_text(exc)})",
                  Reason.UNREADABLE_ANSWER)


def wrong_answer(answered_id: int, running_id: int) -> Outcome:
    """The job process answered for another job than the one it runs (a handler that
    forked): the running job is retried with backoff, or failed."""
    return _fails("failed", f"job process answered for job {answered_id} while running job "
                            f"{running_id}", Reason.UNREADABLE_ANSWER)


def _reason(prefix: str, result: Any) -> str:
    if isinstance(result, dict) and result.get("reason"):
        return f"{prefix} ({result['reason']})"
    return prefix


def backoff_seconds(attempts: int, cap_minutes: float) -> float:
    """Delay before attempt `attempts + 1`: 2^attempts minutes, at most `cap_minutes`."""
    return min(2.0 ** attempts, cap_minutes) * 60.0


def result_json(result: Any) -> str:
    """The stored form of a result: JSON within `RESULT_MAX_BYTES`.

    Raises:
        ValueError: not JSON (NaN, infinity), over the size limit (naming size and limit)
            or nested deeper than `JSON_MAX_DEPTH`.
    """
    depth = limits.json_depth(result)
    if depth > limits.JSON_MAX_DEPTH:
        raise ValueError(f"result is nested more than {limits.JSON_MAX_DEPTH} levels deep; "
                         f"the limit is {limits.JSON_MAX_DEPTH}")
    text = json.dumps(result, default=str, allow_nan=False)
    size = len(text.encode("utf-8"))
    if size > limits.RESULT_MAX_BYTES:
        raise ValueError(f"result is {size:,} bytes of JSON; the limit is "
                         f"{limits.RESULT_MAX_BYTES:,} bytes")
    return text


def next_state(job: Job, outcome: Outcome, now: datetime, policy: Policy) -> Transition:
    """Decide the next state of run `job` (attempt `job.attempts`) after `outcome`.

    Pure: reads only its arguments. Times are naive UTC. A row whose error is written
    gets its `traceback` (the outcome's) and `fingerprint` (`failures.fingerprint`) with
    it; a row that had no error and gets none writes neither (the completed run's path).

    Returns:
        The `Transition`: `completed`, `cancelled`, `failed`, or `pending` (a retry after
        backoff, a `RetryLater`, a cut-off, or a row put back for a worker that knows its
        type).

    Raises:
        ValueError: the result cannot be stored (see `result_json`).
    """
    move = _decide(job, outcome, now, policy)
    if "error" in move.values and (move.values["error"] is not None or job.error is not None):
        error = move.values["error"]  # cleared with the error, or written with it
        move.values["traceback"] = None if error is None else outcome.traceback
        move.values["fingerprint"] = None if error is None else failures.fingerprint(error)
    return move


def _decide(job: Job, outcome: Outcome, now: datetime, policy: Policy) -> Transition:
    values: dict[str, Any] = {"updated_at": now, "locked_until": None}
    if outcome.result is not None:
        values["result_payload"] = result_json(outcome.result)
    values["error"] = outcome.error
    values["outcome_reason"] = None if outcome.reason is None else str(outcome.reason)
    kind = outcome.kind
    if kind == "cut_off":  # the worker stopped before the job ended: attempt not used
        values.update(status=Status.PENDING, attempts=job.attempts - 1, scheduled_at=None)
        if outcome.error is None:  # the last counted attempt's error stays the row's
            del values["error"]
        return Transition(values, Status.PENDING)
    if kind == "retry_later":
        # With a block, the block holds the row (written with this outcome, over the same
        # delay): it is due when the block ends or is lifted early, not a moment later.
        values.update(status=Status.PENDING, attempts=job.attempts - 1,
                      scheduled_at=None if outcome.block else
                      now + timedelta(seconds=outcome.delay_seconds))
        return Transition(values, Status.PENDING, outcome.delay_seconds)
    if kind == "no_handler":
        return _no_handler(job, outcome, now, policy, values)
    # A failed run is retried while attempts remain (a row without max_attempts, which
    # only a worker without its handler claims, has none left).
    if kind == "failed" and job.max_attempts is not None and job.attempts < job.max_attempts:
        delay = backoff_seconds(job.attempts, policy.backoff_cap_minutes)
        values.update(status=Status.PENDING, scheduled_at=now + timedelta(seconds=delay))
        return Transition(values, Status.PENDING, delay)
    status = _FINAL_OF_KIND.get(kind)
    if status is None:
        raise ValueError(f"outcome kind must be one of {', '.join(KINDS)}, got {kind!r}")
    values.update(status=status, finished_at=now)
    return Transition(values, status)


def _no_handler(job: Job, outcome: Outcome, now: datetime, policy: Policy,
                values: dict) -> Transition:
    """Rolling deploys: a worker still on the old code puts the row back (no attempt
    used) with a delay that doubles (5 s to 5 min), and fails it once the type has gone
    unknown for `unknown_type_grace_seconds`. The start of the wait is kept in the
    row's error text ("waiting since ...")."""
    since = _waiting_since(job.error) or now
    waited = (now - since).total_seconds()
    if waited >= policy.unknown_type_grace_seconds:
        values.update(status=Status.FAILED, finished_at=now,
                      error=f"{outcome.error} (no worker that knows it took the row within "
                            f"{policy.unknown_type_grace_seconds:g} s)")
        return Transition(values, Status.FAILED)
    delay = min(300.0, max(5.0, waited), policy.unknown_type_grace_seconds - waited)
    values.update(status=Status.PENDING, attempts=job.attempts - 1,
                  scheduled_at=now + timedelta(seconds=delay),
                  error=f"{outcome.error} on worker {policy.worker_id}; waiting since "
                        f"{since.isoformat(timespec='seconds')} for a worker that knows it")
    return Transition(values, Status.PENDING, delay)


def _waiting_since(error: str | None) -> datetime | None:
    if not error or not error.startswith(NO_HANDLER):
        return None
    found = _SINCE.search(error)
    return datetime.fromisoformat(found.group(1)) if found else None
