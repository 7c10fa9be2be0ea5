"""What a health run reports: `Problem`, `Check` (the answer of one check) and
`HealthReport` (all checks of one run), with the statuses and exit codes. Plain data:
the checks (`checks.py`) fill them in, the report (`report.py`) runs the checks and
collects them, alerts (`alerts.py`) read them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from .. import limits

if TYPE_CHECKING:  # for the annotation of a check function only
    from ..app import App

STATUSES = ("ok", "warn", "fail")
CHECK_ERROR = "check_error"  # the status of a check that itself broke
EXIT_CODES = {"ok": 0, "warn": 1, "fail": 2, CHECK_ERROR: 3}
CheckFn = Callable[["App", "Check"], None]


def worst(statuses) -> str:
    """The worst of some statuses `ok`, `warn`, `fail` (`ok` for none)."""
    return max(statuses, key=STATUSES.index, default="ok")


@dataclass(frozen=True)
class Problem:
    """One thing wrong, with a stable key for alerting (`broker`, `overdue:http-uptime`).

    Attributes:
        key: identifies the problem across health runs (at most `PROBLEM_KEY_MAX_CHARS`); a
            broken check's problem is `check_error:<check>`.
        status: `warn` or `fail` (a broken check's problem is `warn`).
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
        status: `ok`, `warn` or `fail` (the worst of its problems), or `check_error`
            when the check itself raised (its subsystem's state is unknown).
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
        self.problems.append(Problem(key[:limits.PROBLEM_KEY_MAX_CHARS], status, message))
        if self.status != CHECK_ERROR:
            self.status = worst([self.status, status])

    def fail(self, message: str) -> None:
        """Report that what this check watches is failing: one problem
        `check:<name>` at `fail` with `message` (one line for a person)."""
        self.problem(f"check:{self.name}", "fail", f"{self.name}: {message}")

    def warn(self, message: str) -> None:
        """Report a warning about what this check watches: one problem `check:<name>`
        at `warn` with `message` (one line for a person)."""
        self.problem(f"check:{self.name}", "warn", f"{self.name}: {message}")

    def broke(self, exc: BaseException) -> None:
        """Record that the check itself raised `exc` (`check_error`, problem
        `check_error:<name>` at `warn`); problems it found before are kept."""
        text = str(exc).splitlines()[0][:limits.EXCEPTION_TEXT_MAX_CHARS] if str(exc) else ""
        self.message = f"{type(exc).__name__}: {text}"
        self.problem(f"{CHECK_ERROR}:{self.name}", "warn",
                     f"the {self.name} check is broken ({self.message}); "
                     f"the state of {self.name} is unknown")
        self.status = CHECK_ERROR

    def as_dict(self) -> dict:
        """JSON-friendly form."""
        return {"name": self.name, "status": self.status, "message": self.message,
                "duration_ms": round(self.duration_ms, 1), "data": self.data,
                "problems": [p.__dict__ for p in self.problems]}


@dataclass
class HealthReport:
    """All checks of one run.

    Attributes:
        status: `ok`, `warn` or `fail`: the worst of every problem (a broken check's
            problem is a `warn`: it is no proof of an outage).
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
    def check_errors(self) -> list[str]:
        """Names of the checks that broke (status `check_error`)."""
        return [c.name for c in self.checks if c.status == CHECK_ERROR]

    @property
    def exit_code(self) -> int:
        """0 ok, 1 warn, 2 fail; 3 when no check failed but one broke (unknown)."""
        if self.status != "fail" and self.check_errors:
            return EXIT_CODES[CHECK_ERROR]
        return EXIT_CODES[self.status]

    def as_dict(self) -> dict:
        """JSON-friendly form (what `cronjobs health --json` and `/health` print)."""
        return {"status": self.status, "at": self.at.isoformat() + "Z",
                "duration_ms": round(self.duration_ms, 1), "check_errors": self.check_errors,
                "checks": [c.as_dict() for c in self.checks]}


