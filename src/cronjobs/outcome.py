"""What a run's outcome does to its row: the state machine of the handler contract in one place.

`from_return` / `from_exception` turn what `handle()` returned or raised into an
`Outcome`; `next_state(job, outcome, now, policy)` is the pure function that decides the
row's next state (completed, retry at T, failed, cancelled, back to pending) and the
values to write. Texts are cut to their limits here (`cronjobs.limits`), before they
cross the pipe from a job process or reach the database.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from . import limits
from .handler import CronJobHandler, Job, RetryLater

NO_HANDLER = "no handler registered for type"
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
    """

    kind: str
    result: Any = None
    error: str | None = None
    delay_seconds: float = 0
    log: str = ""

    def __post_init__(self) -> None:
        if self.error is not None:
            object.__setattr__(self, "error", limits.cut(self.error, limits.ERROR_MAX_BYTES))
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
    status: str
    delay_seconds: float = 0.0


def from_return(value: Any, handler: CronJobHandler) -> Outcome:
    """Interpret the return value of `handler.handle()`."""
    if value is True:
        return Outcome("completed", log="returned True")
    if value is False:
        error = handler.failure_text() or "handler returned False"
        return Outcome("failed", error=error, log=f"returned False: {error}")
    if isinstance(value, dict) and isinstance(value.get("success"), bool):
        result = value.get("result")
        status = value.get("status")
        if result is not None and not isinstance(result, dict):
            error = f"handler returned a result of type {type(result).__name__}; expected a dict"
            return Outcome("fatal", error=error, log=error)
        if result is not None and limits.json_depth(result) > limits.JSON_MAX_DEPTH:
            # Checked here, in the job process: such a result could not cross the pipe
            # (pickle recurses per level) nor be stored.
            error = (f"handler returned a result nested more than {limits.JSON_MAX_DEPTH} "
                     f"levels deep; the limit is {limits.JSON_MAX_DEPTH}")
            return Outcome("fatal", error=error, log=error)
        if status not in (None, "cancelled", "completed"):
            error = f"handler returned unknown status {status!r:.80}; expected 'cancelled' or none"
            return Outcome("fatal", result=result, error=error, log=error)
        if value["success"]:
            if value.get("status") == "cancelled":
                return Outcome("cancelled", result=result, log=_reason("cancelled", result))
            return Outcome("completed", result=result, log=_reason("completed", result))
        error = (value.get("error") or value.get("message") or handler.failure_text()
                 or _reason("handler reported failure", result))
        if value.get("retry") is False:  # wrong for good: no retry, whatever the attempts
            return Outcome("fatal", result=result, error=str(error),
                           log=f"failure, not retried: {error}")
        return Outcome("failed", result=result, error=str(error), log=f"failure: {error}")
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    error = (f"handler returned {type(value).__name__} {shown}; expected True, False or "
             f"{{'success': bool, 'result': {{...}}}}")
    return Outcome("fatal", error=error, log=error)


def from_exception(exc: BaseException) -> Outcome:
    """Interpret an exception raised by `handle()`."""
    if isinstance(exc, RetryLater):
        text = f"retry later in {exc.delay_seconds:g} s" + (f": {exc.reason}" if exc.reason else "")
        return Outcome("retry_later", delay_seconds=exc.delay_seconds, log=text)
    error = f"{type(exc).__name__}: {exc}"
    return Outcome("failed", error=error, log=f"raised {error}")


def unreadable(exc: BaseException) -> Outcome:
    """The outcome of a claimed row that cannot be prepared for its handler (a stored
    payload that cannot be decoded, a job that cannot be sent to its job process): it
    fails at once, not retried, naming the error — and the worker goes on."""
    error = f"the job could not be prepared to run ({type(exc).__name__}: {str(exc)[:500]})"
    return Outcome("fatal", error=error, log=error)


def timeout_outcome(max_runtime_seconds: float, how: str) -> Outcome:
    """The outcome of a job stopped at its MAX_RUNTIME (`how`: what was done to it)."""
    error = f"timeout after {max_runtime_seconds:g} s (MAX_RUNTIME); {how}"
    return Outcome("failed", error=error, log=error)


def no_handler(job_type: str) -> Outcome:
    """The outcome of a row whose type this process has no handler for."""
    error = f"{NO_HANDLER} {job_type!r}"
    return Outcome("no_handler", error=error, log=error)


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

    Pure: reads only its arguments. Times are naive UTC.

    Returns:
        The `Transition`: `completed`, `cancelled`, `failed`, or `pending` (a retry after
        backoff, a `RetryLater`, a cut-off, or a row put back for a worker that knows its
        type).

    Raises:
        ValueError: the result cannot be stored (see `result_json`).
    """
    values: dict[str, Any] = {"updated_at": now, "locked_until": None}
    if outcome.result is not None:
        values["result_payload"] = result_json(outcome.result)
    values["error"] = outcome.error
    kind = outcome.kind
    if kind == "cut_off":  # the worker stopped before the job ended: attempt not used
        values.update(status="pending", attempts=job.attempts - 1, scheduled_at=None)
        return Transition(values, "pending")
    if kind == "retry_later":
        values.update(status="pending", attempts=job.attempts - 1,
                      scheduled_at=now + timedelta(seconds=outcome.delay_seconds))
        return Transition(values, "pending", outcome.delay_seconds)
    if kind == "no_handler":
        return _no_handler(job, outcome, now, policy, values)
    # A failed run is retried while attempts remain (a row without max_attempts, which
    # only a worker without its handler claims, has none left).
    if kind == "failed" and job.max_attempts is not None and job.attempts < job.max_attempts:
        delay = backoff_seconds(job.attempts, policy.backoff_cap_minutes)
        values.update(status="pending", scheduled_at=now + timedelta(seconds=delay))
        return Transition(values, "pending", delay)
    status = "failed" if kind in ("failed", "fatal") else kind
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
        values.update(status="failed", finished_at=now,
                      error=f"{outcome.error} (no worker that knows it took the row within "
                            f"{policy.unknown_type_grace_seconds:g} s)")
        return Transition(values, "failed")
    delay = min(300.0, max(5.0, waited), policy.unknown_type_grace_seconds - waited)
    values.update(status="pending", attempts=job.attempts - 1,
                  scheduled_at=now + timedelta(seconds=delay),
                  error=f"{outcome.error} on worker {policy.worker_id}; waiting since "
                        f"{since.isoformat(timespec='seconds')} for a worker that knows it")
    return Transition(values, "pending", delay)


def _waiting_since(error: str | None) -> datetime | None:
    if not error or not error.startswith(NO_HANDLER):
        return None
    found = _SINCE.search(error)
    return datetime.fromisoformat(found.group(1)) if found else None
