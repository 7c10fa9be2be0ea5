"""Helpers for testing handlers and systems built on cronjobs (frozen clock, drain).

    from cronjobs.testing import FrozenClock, drain
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .app import App
from .clock import FrozenClock
from .executor import JobReport

__all__ = ["DrainReport", "FrozenClock", "drain"]


@dataclass
class DrainReport:
    """What `drain` ran: one `JobReport` per row, in the order they ran."""

    reports: list[JobReport] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.reports)

    def statuses(self) -> dict[int, str]:
        """Row id -> the status it ended in."""
        return {r.id: r.status for r in self.reports}


def drain(app: App, queues: list[str] | None = None, limit: int = 100_000) -> DrainReport:
    """Run every due row of `queues` (default: every queue of a registered handler) here
    and now, in claim order, until none is due; at most `limit` rows.

    Rows the handlers dispatch meanwhile are run too when they are due. Retries are not
    due until the app's clock reaches their `scheduled_at`.
    """
    report = DrainReport()
    names = queues or app.queues()
    progress = True
    while progress and len(report) < limit:
        progress = False
        for name in names:
            while len(report) < limit and (job := app.executor.run_next(name)) is not None:
                report.reports.append(job)
                progress = True
    return report
