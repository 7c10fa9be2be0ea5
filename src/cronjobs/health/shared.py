"""One health run at a time, its report shared: what `/health` and `/health/ready` serve.

Twenty load-balancer probes at once must not start twenty runs: each run starts a thread
per check, and those threads would queue for connections the pages need. A `SharedHealth`
runs the checks for the first caller; callers that arrive while that run is in progress
wait for its report, and callers within `ttl_seconds` after it get the same report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..app import App
from .check import CheckFn, HealthReport
from .report import run_health


class _Flight:
    """One run in progress: its report once it is ready."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.report: HealthReport | None = None
        self.error: BaseException | None = None


class SharedHealth:
    """Health reports of one App, shared by concurrent callers (single flight + TTL).

    Args:
        app: the system to check.
        checks: `(name, fn)` pairs (default: every check, `checks.ALL`).
        ttl_seconds: how long a finished report is served again (seconds; 0: only
            callers that arrive during a run share it).
        monotonic: the time source for the TTL (seconds; `time.monotonic` unless a test
            injects its own).

    A check whose thread from an earlier run has still not answered (a hung server) is not
    started again: it is reported `fail` at once. So this process never runs more than
    one thread per check, and never holds more health connections than it has checks.
    """

    def __init__(self, app: App, checks: list[tuple[str, CheckFn]] | None = None, *,
                 ttl_seconds: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.app, self.checks, self.ttl = app, checks, ttl_seconds
        self.monotonic = monotonic
        self.runs = 0  # how many runs this object started
        self._lock = threading.Lock()
        self._flight: _Flight | None = None
        self._last: HealthReport | None = None
        self._last_at = 0.0
        self._threads: dict[str, threading.Thread] = {}

    def report(self) -> HealthReport:
        """The report of the run in progress, or of one finished within the TTL, or of a
        new run (made by this caller). Answers within the health deadline plus the
        wait for a run in progress (itself bounded by the deadline).

        Raises:
            What the run raised (`run_health` itself never raises; building the health
            engine may: `ConfigError` for an unusable database URL).
        """
        with self._lock:
            if self._last is not None and self.monotonic() - self._last_at < self.ttl:
                return self._last
            flight, leader = self._flight, self._flight is None
            if leader:
                flight = self._flight = _Flight()
                self.runs += 1
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.report
        try:
            flight.report = run_health(self.app, checks=self.checks, running=self._threads)
        except BaseException as exc:  # the callers waiting for this run get it too
            flight.error = exc
            raise
        finally:
            with self._lock:
                self._flight = None
                if flight.report is not None:
                    self._last, self._last_at = flight.report, self.monotonic()
            flight.done.set()
        return flight.report
