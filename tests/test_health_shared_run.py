"""One health run at a time: callers that arrive during a run get that run's report, a
report is served again for its TTL, and a check that hangs is never started a second time
while its first thread still runs (a hung server cannot pile up threads or connections);
the checks read through a small pool of their own, never the App's."""

from __future__ import annotations

import threading

import pytest

from conftest import new_database
from cronjobs.app import App
from cronjobs.config import Settings
from cronjobs.health import SharedHealth, health_engine, run_health
from cronjobs.health.checks import database
from cronjobs.migrate import upgrade

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


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"])
def test_the_checks_read_through_a_small_pool_of_their_own(backend, tmp_path):
    url, drop = new_database(backend, tmp_path)
    app = App(Settings(database_url=url, health_timeout_seconds=2))
    try:
        upgrade(app.engine)
        app.engine.dispose()
        report = run_health(app)
        assert report.status in ("ok", "warn", "fail")  # it ran and answered
        side = health_engine(app)
        assert side is not app.engine and side is health_engine(app)  # one, kept
        assert side.pool.size() == 3 and side.pool.timeout() == 2
        assert side.pool.checkedin() >= 1  # the checks' connections went back to it...
        assert app.engine.pool.checkedin() == 0  # ...and none came from the App's pool
        assert app.engine.pool.checkedout() == 0
    finally:
        app.close()
        drop()
