"""The handler that runs a row decides its attempts and its lease: a row dispatched without
`max_attempts` (from a process that may not even have the handler) gets the claiming
worker's MAX_ATTEMPTS, an explicit `max_attempts` wins, a worker without the handler
leaves it unset, and the lease is the claiming worker's MAX_RUNTIME plus grace."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import cli_env, run_cli
from cronjobs import CronJobHandler, queue, store
from cronjobs.clock import FrozenClock
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.store.models import cronjob_queue

pytestmark = pytest.mark.core  # the core subset (make test-core)

ONCE_HANDLERS = str(Path(__file__).parent / "attempt_handlers")
ONCE = "test.once.execute"  # MAX_ATTEMPTS 1, MAX_RUNTIME 600 in attempt_handlers/
T0 = datetime(2026, 3, 3, 3, 3, 3)


def web_and_worker(make_app):
    """An App without the handler (a web process without the handler folder) and a worker
    App with it, on one database and one frozen clock."""
    clock = FrozenClock(T0)
    web = make_app(clock=clock, handler_paths=())
    worker = make_app(clock=clock, handler_paths=(ONCE_HANDLERS,))
    return web, worker


def test_a_row_dispatched_without_the_handler_gets_the_workers_max_attempts(make_app):
    web, worker = web_and_worker(make_app)
    job_id = queue.dispatch(ONCE, {"fail": True}, known_type=False, app=web)
    assert queue.get(job_id, ["max_attempts"], app=web) == {"max_attempts": None}
    report = InlineRunner(Executor(worker)).run_next("default")
    assert (report.id, report.status) == (job_id, "failed")  # one failure ends it
    row = queue.get(job_id, app=worker)
    assert (row["status"], row["attempts"], row["max_attempts"]) == ("failed", 1, 1)
    assert "attempt 1/1 on" in row["process_logs"]


def test_the_runners_class_decides_not_the_dispatchers(make_app):
    """The dispatching process has its own class of the type (MAX_ATTEMPTS 5): the row is
    still left unset, and the handler that runs it sees its own MAX_ATTEMPTS as an int."""
    web, worker = web_and_worker(make_app)

    class OldOnce(CronJobHandler):
        TYPE = ONCE
        MAX_ATTEMPTS = 5

        def handle(self, payload, job):
            return True

    web.handlers.register(ONCE, OldOnce)
    job_id = queue.dispatch(ONCE, {}, app=web)
    assert queue.get(job_id, ["max_attempts"], app=web) == {"max_attempts": None}
    assert InlineRunner(Executor(worker)).run_id(job_id).status == "completed"
    row = queue.get(job_id, app=worker)
    assert row["max_attempts"] == 1 and json.loads(row["result_payload"]) == {"max_attempts": 1}


def test_an_explicit_max_attempts_wins(make_app):
    web, worker = web_and_worker(make_app)
    job_id = queue.dispatch(ONCE, {"fail": True}, known_type=False, max_attempts=2, app=web)
    runner = InlineRunner(Executor(worker))
    assert runner.run_next("default").status == "pending"  # retried: 2 attempts
    assert queue.get(job_id, ["attempts", "max_attempts"], app=worker) == {
        "attempts": 1, "max_attempts": 2}
    worker.clock.advance(3 * 60)  # past the 2-minute backoff
    assert runner.run_next("default").status == "failed"
    row = queue.get(job_id, app=worker)
    assert (row["status"], row["attempts"], row["max_attempts"]) == ("failed", 2, 2)


def test_a_worker_without_the_handler_leaves_it_unset(make_app):
    web, worker = web_and_worker(make_app)
    job_id = queue.dispatch(ONCE, {}, known_type=False, app=web)
    # No handler: put back.
    assert InlineRunner(Executor(web)).run_next("default").status == "pending"
    row = queue.get(job_id, app=web)
    assert (row["status"], row["attempts"], row["max_attempts"]) == ("pending", 0, None)
    assert "attempt 1/— (not counted) on" in row["process_logs"]  # attempts back to 0
    worker.clock.advance(10)  # the put-back delay (5 s)
    assert InlineRunner(Executor(worker)).run_next("default").status == "completed"
    row = queue.get(job_id, app=worker)
    assert (row["attempts"], row["max_attempts"]) == (1, 1)
    assert json.loads(row["result_payload"]) == {"max_attempts": 1}


def test_the_lease_is_the_claiming_workers(make_app):
    """The dispatcher knows nothing of the type (its lease would be 120 s + grace); the
    claiming worker's handler has MAX_RUNTIME 600 s, and that is the lease written."""
    web, worker = web_and_worker(make_app)
    job_id = queue.dispatch(ONCE, {}, known_type=False, app=web)
    grace = worker.settings.lease_grace_seconds
    assert Executor(web).terms(ONCE).lease_seconds == 120 + grace
    with worker.engine.begin() as conn:
        [row] = Executor(worker).claim_rows(conn, T0, queue="default").rows
    with worker.engine.connect() as conn:
        lease = (store.get_job(conn, job_id, ["locked_until"])["locked_until"]
                 - store.database_now(conn)).total_seconds()
    assert row["id"] == job_id and row["max_attempts"] == 1
    assert 600 + grace - 30 < lease <= 600 + grace, lease


def test_recover_stale_puts_an_unset_row_back(make_app):
    """A worker without the handler claimed the row (no attempts resolved) and was lost:
    recover-stale puts it back to pending instead of judging attempts it never had."""
    web, worker = web_and_worker(make_app)
    job_id = queue.dispatch(ONCE, {}, known_type=False, app=web)
    with web.engine.begin() as conn:
        [claimed] = Executor(web).claim_rows(conn, T0, queue="default").rows
        assert claimed["max_attempts"] is None
        past = store.database_now(conn) - timedelta(hours=1)
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id)
                     .values(locked_until=past))
    assert queue.recover_stale(5, app=web) == 1
    row = queue.get(job_id, app=web)
    assert (row["status"], row["max_attempts"]) == ("pending", None)
    assert "lease expired" in row["error"] and "no attempts left" not in row["error"]


def test_the_cli_shows_and_runs_an_unset_row_with_its_handler(make_app, db_url, namespace):
    """`cronjobs get` shows the row as stored: null until a worker claims it, whatever
    handlers the command knows; `cronjobs run` claims it with the handler's MAX_ATTEMPTS:
    one failure ends it, and the row then holds 1."""
    web, _ = web_and_worker(make_app)
    job_id = queue.dispatch(ONCE, {"fail": True}, known_type=False, app=web)
    without = cli_env(db_url, namespace, CRONJOBS_HANDLER_PATHS="")
    with_once = cli_env(db_url, namespace, CRONJOBS_HANDLER_PATHS=ONCE_HANDLERS)
    shown = run_cli(["get", str(job_id), "--columns", "id,max_attempts"], without)
    assert json.loads(shown.stdout) == {"id": job_id, "max_attempts": None}, shown.stderr
    shown = run_cli(["get", str(job_id), "--columns", "max_attempts"], with_once)
    assert json.loads(shown.stdout) == {"max_attempts": None}, shown.stderr
    ran = run_cli(["run", str(job_id)], with_once)
    assert ran.returncode == 1 and f"job {job_id} ({ONCE}): failed" in ran.stdout, ran.stderr
    shown = run_cli(["get", str(job_id), "--columns", "max_attempts"], without)
    assert json.loads(shown.stdout) == {"max_attempts": 1}, shown.stderr
    with web.engine.connect() as conn:
        row = conn.execute(sa.select(cronjob_queue.c.status, cronjob_queue.c.attempts,
                                     cronjob_queue.c.max_attempts)
                           .where(cronjob_queue.c.id == job_id)).one()
    assert tuple(row) == ("failed", 1, 1)
