"""Claim ahead (`pool.SlotPool`): while a queue has a backlog of short jobs, a worker claims
rows beyond its idle slots, which start as slots free; a row claimed ahead and not started
within `AHEAD_WAIT_SECONDS`, or still waiting when the worker stops, goes back to
`pending` with its attempt given back. Real worker processes, job processes and
databases (SQLite; the drain also on MariaDB).
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from conftest import effect_rows
from cronjobs import queue
from cronjobs.config import Settings
from cronjobs.errors import ConfigError
from cronjobs.store.models import cronjob_queue
from cronjobs.worker import pool
from cronjobs.worker.burst import BurstWorker
from cronjobs.worker.loop import Signals, WorkerProcess, connections_needed
from test_worker_e2e import REDIS, all_completed, wait_for

pytestmark = pytest.mark.core  # the core subset (make test-core)

RECORD = "test.record.execute"


def rows(app, ids: list[int]) -> dict[int, tuple[str, int]]:
    """`{id: (status, attempts)}` of rows `ids`."""
    q = cronjob_queue
    with app.engine.connect() as conn:
        return {r.id: (r.status, r.attempts) for r in conn.execute(
            sa.select(q.c.id, q.c.status, q.c.attempts).where(q.c.id.in_(ids)))}


def burst_logs(app, ids: list[int]) -> list[str]:
    """The `process_logs` of rows `ids`."""
    q = cronjob_queue
    with app.engine.connect() as conn:
        return [r or "" for r in conn.execute(
            sa.select(q.c.process_logs).where(q.c.id.in_(ids))).scalars()]


def record_claims(worker: WorkerProcess) -> list[int]:
    """The `limit` of every claim statement `worker` makes from now on."""
    limits: list[int] = []
    claim = worker.executor.claim_rows

    def recording(conn, now, **kwargs):
        limits.append(kwargs["limit"])
        return claim(conn, now, **kwargs)

    worker.executor.claim_rows = recording
    return limits


def drain(app, rows: int) -> tuple[WorkerProcess, list[int], list[int]]:
    """Dispatch `rows` quick rows and drain them with a two-slot worker; returns the
    stopped worker, the row ids and the `limit` of each of its claims."""
    ids = queue.dispatch_many([{"type": RECORD, "payload": {"tag": i}} for i in range(rows)])
    worker = WorkerProcess(app, ["default"], 2)
    limits = record_claims(worker)
    worker.start()
    try:
        wait_for(all_completed(app, rows), 120, f"{rows} jobs completed")
    finally:
        worker.shutdown(10)
    return worker, ids, limits


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)
def test_a_backlog_of_quick_jobs_is_claimed_ahead_of_the_free_slots_and_each_row_runs_once(
        make_app):
    app = make_app(broker_url=REDIS, pool_size=connections_needed(2))
    worker, ids, limits = drain(app, 300)
    assert worker.pool.claim_ahead == 2 * app.settings.claim_ahead_per_slot == 4
    # After the first quick jobs the claims ask for the idle slots and the rows ahead.
    assert max(limits) > 2, limits
    assert max(limits) <= 2 + 4, limits
    assert set(rows(app, ids).values()) == {("completed", 1)}
    ran = [e["job_id"] for e in effect_rows(app, "record")]
    assert sorted(ran) == sorted(ids)  # every row ran, none twice


def test_without_claim_ahead_a_claim_asks_for_the_idle_slots_only(make_app):
    app = make_app(broker_url=REDIS, pool_size=connections_needed(2), claim_ahead_per_slot=0)
    worker, ids, limits = drain(app, 60)
    assert worker.pool.claim_ahead == 0
    assert set(rows(app, ids).values()) == {("completed", 1)}
    assert limits and max(limits) <= 2, limits


def a_long_job_behind_quick_ones(sleep: float = 4) -> tuple[list[int], int, list[int]]:
    """Three quick rows (a one-slot worker claims ahead after the first), then a row of
    `sleep` seconds, then two rows it claims ahead while the long one runs."""
    quick = [queue.dispatch(RECORD, {"tag": f"q{i}"}, priority=1) for i in range(3)]
    long = queue.dispatch(RECORD, {"tag": "long", "sleep": sleep}, priority=2)
    behind = [queue.dispatch(RECORD, {"tag": f"b{i}"}, priority=3) for i in range(2)]
    return quick, long, behind


def start_a_long_job_behind_quick_ones(app) -> tuple[WorkerProcess, int, list[int]]:
    """A one-slot worker on `a_long_job_behind_quick_ones`. Returns the running worker,
    the long row and the two rows behind it, once the long row runs and the two are
    claimed (`running`, attempt 1, not started)."""
    quick, long, behind = a_long_job_behind_quick_ones()
    worker = WorkerProcess(app, ["default"], 1)
    assert worker.pool.claim_ahead == 2
    worker.start()
    wait_for(lambda: rows(app, quick) == dict.fromkeys(quick, ("completed", 1))
             and rows(app, behind) == dict.fromkeys(behind, ("running", 1)), 20,
             "the quick rows done and the two behind the long one claimed ahead")
    assert rows(app, [long]) == {long: ("running", 1)}
    assert [e["job_id"] for e in effect_rows(app, "record")] == quick  # the two wait
    return worker, long, behind


def test_a_row_claimed_ahead_and_not_started_in_time_goes_back_with_its_attempt(make_app):
    app = make_app(broker_url=REDIS, pool_size=connections_needed(1))
    worker, long, behind = start_a_long_job_behind_quick_ones(app)
    try:
        # Given back AHEAD_WAIT_SECONDS after their claim, while the long job still runs.
        wait_for(lambda: rows(app, behind) == dict.fromkeys(behind, ("pending", 0)),
                 pool.AHEAD_WAIT_SECONDS + 2, "the rows claimed ahead given back")
        assert rows(app, [long]) == {long: ("running", 1)}
        wait_for(all_completed(app, 6), 30, "every row completed")
    finally:
        worker.shutdown(10)
    assert rows(app, behind) == dict.fromkeys(behind, ("completed", 1))
    ran = [e["job_id"] for e in effect_rows(app, "record")]
    assert ran[-3:] == [long, *behind]  # each ran once, after the long one
    assert worker.executor.jobs_done == 6  # the two given back are not jobs done


def test_a_stopping_worker_gives_back_the_rows_it_claimed_ahead(make_app, monkeypatch):
    monkeypatch.setattr(pool, "AHEAD_WAIT_SECONDS", 60.0)  # only the stop gives them back
    app = make_app(broker_url=REDIS, pool_size=connections_needed(1))
    worker, long, behind = start_a_long_job_behind_quick_ones(app)
    began = time.monotonic()
    worker.shutdown(10)  # lets the long job finish; the two never start
    assert time.monotonic() - began < 10
    assert rows(app, [long]) == {long: ("completed", 1)}
    assert rows(app, behind) == dict.fromkeys(behind, ("pending", 0))
    assert long in [e["job_id"] for e in effect_rows(app, "record")]
    assert not set(behind) & {e["job_id"] for e in effect_rows(app, "record")}
    assert worker.executor.jobs_done == 4


def test_a_burst_counts_the_rows_it_gave_back_once_they_ran(make_app):
    app = make_app(broker_url=REDIS, pool_size=connections_needed(1))
    quick, long, behind = a_long_job_behind_quick_ones(sleep=2.5)
    burst = BurstWorker(app, ["default"], 1)
    report = burst.run(Signals(), shutdown_timeout=10)
    ran = [e["job_id"] for e in effect_rows(app, "record")]
    assert sorted(ran) == sorted([*quick, long, *behind])  # each ran once
    assert set(rows(app, behind).values()) == {("completed", 1)}
    assert "given back" in "".join(burst_logs(app, behind))
    assert (report.ran, report.completed, report.retried) == (6, 6, 0), report.line()


@pytest.mark.parametrize("value", ["-1", "65", "10" * 12, "2.5", "abc", ""])
def test_a_claim_ahead_out_of_its_range_is_refused_naming_the_setting(value):
    with pytest.raises(ConfigError, match=r"claim_ahead_per_slot=") as err:
        Settings.load({"CRONJOBS_CLAIM_AHEAD_PER_SLOT": value})
    assert repr(value) in str(err.value)
