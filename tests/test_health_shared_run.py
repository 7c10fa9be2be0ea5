"""One health run at a time: callers that arrive during a run get that run's report, a
report is served again for its TTL, and a check that hangs is never started a second time
while its first thread still runs (a hung server cannot pile up threads or connections)."""

from __future__ import annotations

import threading

import pytest

from cronjobs.health import SharedHealth
from cronjobs.health.checks import database

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


class Clock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@SQLITE
def test_concurrent_callers_share_one_run_and_its_report_for_the_ttl(make_app):
    app = make_app()
    started, release, calls = threading.Event(), threading.Event(), []

    def slow(app, check) -> None:
        calls.append(threading.current_thread().name)
        started.set()
        release.wait(10)
        check.message = f"run {len(calls)}"

    clock = Clock()
    shared = SharedHealth(app, [("database", database), ("slow", slow)], ttl_seconds=2,
                          monotonic=clock)
    reports = []
    callers = [threading.Thread(target=lambda: reports.append(shared.report())) for _ in range(20)]
    callers[0].start()
    assert started.wait(10)  # the first caller's run is in progress
    for caller in callers[1:]:
        caller.start()
    release.set()
    for caller in callers:
        caller.join(10)
    assert len(reports) == 20 and all(r is reports[0] for r in reports)
    assert shared.runs == 1 and len(calls) == 1
    assert [c.message for c in reports[0].checks][1] == "run 1"
    clock.now += 1.9  # within the TTL: the same report, no run
    assert shared.report() is reports[0] and shared.runs == 1
    clock.now += 0.2  # past it: a new run
    fresh = shared.report()
    assert fresh is not reports[0] and shared.runs == 2 and fresh.checks[1].message == "run 2"


@SQLITE
def test_a_hung_check_is_not_started_again_while_it_runs(make_app):
    app = make_app(health_timeout_seconds=0.3)
    hung, starts = threading.Event(), []

    def stuck(app, check) -> None:
        starts.append(1)
        hung.wait(30)

    shared = SharedHealth(app, [("database", database), ("stuck", stuck)], ttl_seconds=0)
    first = shared.report()
    assert [c.status for c in first.checks] == ["ok", "fail"]
    assert first.checks[1].message == "no answer within 0.3 s"
    second = shared.report()
    assert second is not first and len(starts) == 1  # not started again
    assert second.checks[1].message == ("no answer within 0.3 s (its previous run has not "
                                        "answered yet)")
    assert second.checks[0].status == "ok" and second.status == "fail"
    assert second.duration_ms < 300  # nothing waited for the hung check
    hung.set()
    for thread in threading.enumerate():
        if thread.name == "cronjobs-health-stuck":
            thread.join(10)
    third = shared.report()
    assert len(starts) == 2 and third.status == "ok"
