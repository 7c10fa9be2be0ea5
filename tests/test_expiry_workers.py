"""STARTING_DEADLINE with a real `cronjobs worker` (Redis): a slot whose queue is paused
for 5 minutes across it ends `expired` — `handle()` never called (its marker file stays
absent), attempts 0, the slot counted as a skip (`expired`) — on MariaDB; the expiry path
(claim refusal, the sweep's end, the dependents) on PostgreSQL in-process.

The slot is made to lie 2 minutes in the past (`tick(now)` with a frozen clock) instead of
waiting for its deadline; the worker judges on the real clock."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from cronjobs import queue, store
from cronjobs.clock import FrozenClock, SystemClock
from cronjobs.job.expiry import expire
from cronjobs.schedule.scheduler import tick
from cronjobs.status import Reason, Status
from cronjobs.store.db import run_in_transaction
from cronjobs.store.models import cronjob_runtime
from cronjobs.testing import drain
from test_worker_e2e import wait_for, worker

HANDLERS = str(Path(__file__).parent / "expiry_handlers")
TASK, QUEUE = "marked-report", "expiry"


def runtime(app) -> dict:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == TASK)).mappings().one())


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_a_paused_slot_expires_under_a_real_worker(make_app, db_url, namespace, tmp_path):
    real = SystemClock().now().replace(microsecond=0)  # naive UTC, as the worker judges
    app = make_app(clock=FrozenClock(real - timedelta(minutes=2)), handler_paths=(HANDLERS,))
    run_in_transaction(app.engine, lambda conn: store.pause(
        conn, "queue", QUEUE, now=real, until=real + timedelta(minutes=5), by="test"))
    started = {t: i for t, _, i in tick(app.clock.now(), app=app).started}
    job_id = started[TASK]
    slot_at = (real - timedelta(minutes=2)).replace(second=0)
    assert queue.get(job_id, app=app)["expires_at"] == slot_at + timedelta(seconds=60)
    marker, log = tmp_path / "ran", tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=2, queues=QUEUE,
                CRONJOBS_HANDLER_PATHS=HANDLERS, EXPIRY_MARKER=str(marker),
                CRONJOBS_SWEEP_INTERVAL_SECONDS="0.5") as proc:
        wait_for(lambda: queue.get(job_id, app=app)["status"] == Status.EXPIRED, 10,
                 "the slot's row to expire", proc, log)
    row = queue.get(job_id, app=app)
    assert (row["attempts"], row["outcome_reason"], row["started_at"]) == (
        0, Reason.EXPIRED, None)
    assert row["error"] == f"not started by its deadline {slot_at + timedelta(seconds=60)} UTC"
    assert not marker.exists()
    rt = runtime(app)
    assert (rt["skipped_count"], rt["last_skip_reason"], rt["last_status"]) == (
        1, "expired", Status.EXPIRED)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_expiry_path_on_postgresql(make_app):
    t0 = datetime(2027, 3, 2, 9, 0, 5)
    app = make_app(clock=FrozenClock(t0), handler_paths=(HANDLERS,))
    slot = {t: i for t, _, i in tick(t0, app=app).started}[TASK]
    late = queue.dispatch("marked.report.discover", expires_in="30s", app=app)
    after = queue.dispatch("marked.report.discover", depends_on=[late], app=app)
    app.clock.set(t0 + timedelta(seconds=60))  # 09:01:05: both deadlines have passed
    assert drain(app, [QUEUE]).reports == []
    assert expire(app) == []  # drain ended them already, as the sweep does
    rows = {i: queue.get(i, app=app) for i in (slot, late, after)}
    assert [(r["status"], r["attempts"]) for r in rows.values()] == [
        (Status.EXPIRED, 0), (Status.EXPIRED, 0), (Status.CANCELLED, 0)]
    assert rows[late]["error"] == "not started by its deadline 2027-03-02 09:00:35 UTC"
    rt = runtime(app)
    assert (rt["skipped_count"], rt["last_skipped_slot"], rt["last_skip_reason"]) == (
        1, "202703020900", "expired")
