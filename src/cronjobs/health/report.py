"""The health report: run every check in its own thread and answer within a deadline.

A check that has not answered by the deadline (a hung database or broker) is reported as
`fail` with "no answer within N s"; its thread is a daemon and is left behind, so a hung
server can never hang `cronjobs health`, `/health` or the health task.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from ..app import App

STATUSES = ("ok", "warn", "fail")
EXIT_CODES = {"ok": 0, "warn": 1, "fail": 2}


def worst(statuses) -> str:  # noqa: ANN001
    """The worst of some statuses (`ok` for none)."""
    return max(statuses, key=STATUSES.index, default="ok")


@dataclass(frozen=True)
class Problem:
    """One thing wrong, with a stable key for alerting (`broker`, `overdue:http-uptime`).

    Attributes:
        key: identifies the problem across health runs (at most 191 characters).
        status: `warn` or `fail`.
        message: one line for a person.
    """

    key: str
    status: str
    message: str


@dataclass
class Check:
    """The answer of one check.

    Attributes:
        name: `database`, `broker`, `queues`, ...
        status: `ok`, `warn` or `fail` (the worst of its problems).
        message: one line.
        data: figures (JSON-friendly: numbers, strings, lists, dicts).
        problems: what is wrong, one `Problem` per subject (queue, task, ...).
        duration_ms: how long the check took.
    """

    name: str
    status: str = "ok"
    message: str = ""
    data: dict = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    duration_ms: float = 0.0

    def problem(self, key: str, status: str, message: str) -> None:
        """Add a problem; the check's status becomes the worst seen."""
        self.problems.append(Problem(key[:191], status, message))
        self.status = worst([self.status, status])

    def as_dict(self) -> dict:
        """JSON-friendly form."""
        return {"name": self.name, "status": self.status, "message": self.message,
                "duration_ms": round(self.duration_ms, 1), "data": self.data,
                "problems": [p.__dict__ for p in self.problems]}


@dataclass
class HealthReport:
    """All checks of one run.

    Attributes:
        status: the worst status of the checks.
        checks: in a fixed order.
        at: when the run started (naive UTC).
        duration_ms: how long the whole run took.
    """

    status: str
    checks: list[Check]
    at: datetime
    duration_ms: float

    @property
    def problems(self) -> list[Problem]:
        """Every problem of every check."""
        return [p for c in self.checks for p in c.problems]

    @property
    def exit_code(self) -> int:
        """0 ok, 1 warn, 2 fail."""
        return EXIT_CODES[self.status]

    def as_dict(self) -> dict:
        """JSON-friendly form (what `cronjobs health --json` and `/health` print)."""
        return {"status": self.status, "at": self.at.isoformat() + "Z",
                "duration_ms": round(self.duration_ms, 1),
                "checks": [c.as_dict() for c in self.checks]}


def run_health(app: App, timeout_seconds: float | None = None,
               checks: list[tuple[str, Callable[[App, Check], None]]] | None = None) -> HealthReport:
    """Run every check at the same time and collect what answered within the deadline.

    Args:
        app: the system to check.
        timeout_seconds: the deadline for the whole run (default
            `settings.health_timeout_seconds`).
        checks: `(name, fn(app, check))` pairs (default: `checks.ALL`).

    Returns:
        A `HealthReport`. It never raises: a check that raises is `fail` with the error.
    """
    from .checks import ALL

    timeout = app.settings.health_timeout_seconds if timeout_seconds is None else timeout_seconds
    started, at = time.monotonic(), app.clock.now()
    results = [Check(name) for name, _ in (checks or ALL)]
    threads = []
    for check, (_, fn) in zip(results, checks or ALL):
        thread = threading.Thread(target=_run_one, args=(fn, app, check), daemon=True,
                                  name=f"cronjobs-health-{check.name}")
        thread.start()
        threads.append(thread)
    deadline = started + timeout
    final = []
    for check, thread in zip(results, threads):
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            late = Check(check.name, duration_ms=timeout * 1000)
            late.message = f"no answer within {timeout:g} s"
            late.problem(check.name, "fail", f"{check.name}: no answer within {timeout:g} s")
            final.append(late)
        else:
            final.append(check)
    return HealthReport(worst(c.status for c in final), final, at,
                        (time.monotonic() - started) * 1000)


def _run_one(fn: Callable[[App, Check], None], app: App, check: Check) -> None:
    started = time.monotonic()
    try:
        fn(app, check)
    except Exception as exc:  # a check that breaks is a failed check, never a crash
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        check.message = f"{type(exc).__name__}: {text}"
        check.problem(check.name, "fail", f"{check.name}: {check.message}")
    check.duration_ms = (time.monotonic() - started) * 1000
