"""Helpers for testing handlers and systems built on cronjobs (test app, frozen clock, drain).

    from cronjobs.testing import FrozenClock, drain, make_test_app
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .app import App, use
from .clock import FrozenClock
from .config import Settings
from .job.executor import Executor
from .job.expiry import expire
from .job.inline import InlineRunner
from .migrate import upgrade
from .worker.burst import BurstReport, count_waiting

__all__ = ["DrainReport", "FrozenClock", "drain", "make_test_app"]


def make_test_app(folder: str | Path, *, handler_paths: Iterable[str | Path] = (),
                  now: datetime | None = None, database_url: str | None = None,
                  **settings: Any) -> App:
    """A ready App for a test: migrated database, frozen clock, your handlers registered.

    The App has a handler registry of its own (built-in handlers, entry points,
    `handler_paths`, and classes registered by code with `registry.register`), so tests
    never share registrations through module globals; register a class for one test with
    `app.handlers.register(TYPE, cls)`. The App is installed as the current one, so
    `cronjobs.queue` functions work with or without `app=`. Messages go to the in-process
    broker; nothing runs until you call `queue.process(id)` or `drain(app)`.

    Args:
        folder: a folder of the test's own (pytest's `tmp_path`; made when missing); the
            SQLite database `cronjobs-test.db` is made in it.
        handler_paths: folders of handler files to register.
        now: the frozen clock's start, naive UTC (default 2026-01-01 00:00); move it with
            `app.clock.advance(seconds)` or `app.clock.set(datetime)`.
        database_url: use this database instead of SQLite (it is migrated too).
        **settings: other settings by their keys (`tls_hosts=("example.com",)`, ...) or
            sections (`alerts={"smtp_to": ...}`), as `Settings` takes them.

    Returns:
        The App (`app.clock` is the `FrozenClock`).
    """
    Path(folder).mkdir(parents=True, exist_ok=True)
    url = database_url or f"sqlite:///{Path(folder) / 'cronjobs-test.db'}"
    config = Settings(database_url=url, handler_paths=tuple(str(p) for p in handler_paths),
                      **settings)
    app = App(config, clock=FrozenClock(now or datetime(2026, 1, 1)))
    app.handlers.load()  # a broken handler fails here, not in the first dispatch
    upgrade(app.engine)
    use(app)
    return app


@dataclass
class DrainReport(BurstReport):
    """What `drain` ran: one `JobReport` per run, in the order they ran (`len()` is their
    number), and the same counts as `cronjobs worker --burst` (`burst.BurstReport`):
    `ran`, `completed`, `failed`, `retried`, `waiting.scheduled_later`, `waiting.held`
    (rows left `pending` when it ended, at the app's clock), `drained` (False when it
    stopped at `limit`) and `line()`."""

    def __len__(self) -> int:
        return len(self.reports)

    def statuses(self) -> dict[int, str]:
        """Row id -> the status it ended in."""
        return {r.id: r.status for r in self.reports}


def drain(app: App, queues: list[str] | None = None, limit: int = 100_000) -> DrainReport:
    """Run every due row of `queues` (default: every queue of a registered handler) here
    and now, in claim order, until none is due; at most `limit` rows.

    Rows the handlers dispatch meanwhile are run too when they are due. Retries are not
    due until the app's clock reaches their `scheduled_at`. Rows past their `expires_at`
    are ended `expired` first, as the worker's sweep does (`job.expiry.expire`).

    Returns:
        A `DrainReport`: the reports of the runs, and the rows of `queues` left
        waiting (due later, or due but not claimable: held).
    """
    report = DrainReport()
    runner = InlineRunner(Executor(app))
    names = queues or app.queues()
    expire(app, names)
    progress = True
    while progress and len(report) < limit:
        progress = False
        for name in names:
            while len(report) < limit and (job := runner.run_next(name)) is not None:
                report.reports.append(job)
                progress = True
    report.drained = len(report) < limit
    report.waiting = count_waiting(app, names)
    return report
