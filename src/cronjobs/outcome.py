"""Turn what `handle()` returned (or raised) into the row's next state (SPEC §3 table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .handler import CronJobHandler, RetryLater


@dataclass(frozen=True)
class Outcome:
    """What to do with a row after its handler ran.

    Attributes:
        kind: `completed`, `failed` (retried with backoff while attempts remain),
            `fatal` (failed, not retried), `cancelled`, or `retry_later` (no attempt used).
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
        if status not in (None, "cancelled", "completed"):
            error = f"handler returned unknown status {status!r}; expected 'cancelled' or none"
            return Outcome("fatal", result=result, error=error, log=error)
        if value["success"]:
            if value.get("status") == "cancelled":
                return Outcome("cancelled", result=result, log=_reason("cancelled", result))
            return Outcome("completed", result=result, log=_reason("completed", result))
        error = (value.get("error") or value.get("message") or handler.failure_text()
                 or _reason("handler reported failure", result))
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


def _reason(prefix: str, result: Any) -> str:
    if isinstance(result, dict) and result.get("reason"):
        return f"{prefix} ({result['reason']})"
    return prefix


def backoff_seconds(attempts: int, cap_minutes: float) -> float:
    """Delay before attempt `attempts + 1`: 2^attempts minutes, at most `cap_minutes`."""
    return min(2.0 ** attempts, cap_minutes) * 60.0
