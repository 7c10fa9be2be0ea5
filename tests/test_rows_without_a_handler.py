"""Rows nobody would ever run.

A row whose handler (and queue) was removed is reported by `cronjobs workers`, and a worker
started for that queue takes it (failing it with "no handler" after the grace period). A
worker that does not know a type (a rolling deploy: the old code meets a row of the new)
puts the row back without using an attempt, with a growing delay, and fails it only after
`unknown_type_grace_seconds`.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from conftest import cli_env, run_cli
from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.worker import heartbeat
from test_worker_e2e import REDIS, wait_for, worker

T0 = datetime(2026, 6, 1, 12, 0, 0)


class SpecialExecute(CronJobHandler):
    TYPE = "test.special.execute"
    QUEUE = "special"

    def handle(self, payload, job):
        return True


def test_a_worker_on_the_old_code_puts_rows_back_then_fails_them(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, unknown_type_grace_seconds=600)
    job_id = queue.dispatch("test.newcode.execute", {}, max_attempts=1, known_type=False)
    delays = []
    while True:
        row = queue.get(job_id)
        if row["status"] != "pending":
            break
        clock.set(row["scheduled_at"] or T0)
        report = InlineRunner(Executor(app)).run_next("default")
        assert report.id == job_id
        row = queue.get(job_id)
        if row["status"] == "pending":
            assert row["attempts"] == 0, "no attempt is used while waiting"
            assert "waiting since 2026-06-01T12:00:00 for a worker that knows it" in row["error"]
            delays.append((row["scheduled_at"] - clock.now()).total_seconds())
    assert delays[:6] == [5, 5, 10, 20, 40, 80] and max(delays) <= 300, delays
    assert sum(delays) == 600, "failed exactly at the end of the grace period"
    assert row["status"] == "failed" and row["attempts"] == 1
    assert row["error"].startswith("no handler registered for type 'test.newcode.execute' "
                                   "(no worker that knows it took the row within 600 s)")


def test_a_worker_on_the_new_code_takes_a_put_back_row(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    job_id = queue.dispatch("test.special.execute", {}, queue="default", known_type=False)
    InlineRunner(Executor(app)).run_next("default")  # an old worker: no handler, put back
    assert queue.get(job_id)["status"] == "pending"
    app.handlers.register(SpecialExecute.TYPE, SpecialExecute)  # the new code arrives
    clock.advance(5)
    assert InlineRunner(Executor(app)).run_next("default").status == "completed"
    row = queue.get(job_id)
    assert row["attempts"] == 1 and row["error"] is None


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_rows_of_a_removed_handler_are_reported_and_can_be_drained(make_app, db_url, namespace,
                                                                    tmp_path):
    app = make_app(broker_url=REDIS)
    app.handlers.register(SpecialExecute.TYPE, SpecialExecute)
    ids = [queue.dispatch(SpecialExecute.TYPE, {}, app=app) for _ in range(3)]
    assert {queue.get(i, ["queue"])["queue"] for i in ids} == {"special"}
    app.handlers.unregister(SpecialExecute.TYPE)  # the handler is removed from the code
    env = cli_env(db_url, namespace, broker_url=REDIS)
    heartbeat.beat(app, "host:1", ["default", "maintenance"], "running", 0, [])

    seen = run_cli(["workers"], env)
    assert seen.returncode == 1
    assert ("WARNING: queue 'special' has 3 pending row(s) (3 due) and no live worker; "
            "start one with `cronjobs worker --queues special`") in seen.stdout
    report = json.loads(run_cli(["workers", "--json"], env).stdout)
    assert report["orphaned"]["special"]["pending"] == 3 and report["unserved"] == []

    def rows_now() -> list[dict]:
        return [queue.get(i, app=app) for i in ids]

    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=2, queues="special",
                CRONJOBS_UNKNOWN_TYPE_GRACE_SECONDS="0") as proc:
        rows = wait_for(lambda: all(r["status"] == "failed" for r in rows_now()) and rows_now(),
                        60, "the orphaned rows failed with 'no handler'", proc, log)
    for row in rows:
        assert row["error"].startswith("no handler registered for type 'test.special.execute'")
    heartbeat.forget(app, "host:1")
    assert run_cli(["workers", "--json"], env).returncode == 1, "default has no worker now"
