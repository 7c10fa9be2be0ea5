"""The worker's execution model. One loop per worker process writes outcomes and
claims rows in shared transactions, job processes come from a preloaded fork server, the
connection pool is sized from the slots, handlers may ask for ISOLATION = "thread"."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa

from conftest import SAMPLE_HANDLERS, cli_env, effect_rows
from cronjobs import queue
from cronjobs.store.models import cronjob_queue
from cronjobs.worker.loop import Limits, WorkerProcess, connections_needed
from test_worker_e2e import REDIS, all_completed, wait_for

pytestmark = pytest.mark.core  # the core subset (make test-core)

MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
THREAD_HANDLERS = str(Path(__file__).parent / "thread_handlers")
CRASH_HANDLERS = str(Path(__file__).parent / "crash_handlers")


@MARIADB
def test_a_1000_job_drain_opens_no_connection_beyond_the_pool_and_batches_its_writes(make_app):
    app = make_app(broker_url=REDIS, pool_size=connections_needed(8))
    ids = queue.dispatch_many([{"type": "test.shape.execute", "payload": {"shape": "true"}}] * 1000)
    worker = WorkerProcess(app, ["default"], 8)
    opened = []
    sa.event.listen(app.engine, "connect", lambda *a: opened.append(time.monotonic()))
    worker.start()
    try:
        wait_for(all_completed(app, 1000), 120, "1,000 jobs completed")
    finally:
        worker.shutdown(10)
    pool_size = app.engine.pool.size()
    assert pool_size == 8 + 3
    assert 1 <= len(opened) <= pool_size, f"{len(opened)} connections opened"
    assert worker.executor.jobs_done == 1000 and len(ids) == 1000
    # One transaction writes many outcomes and claims many rows (group commit, batches).
    assert worker.pool.commits <= 500, worker.pool.commits
    assert worker.pool.claims <= 500, worker.pool.claims
    print(f"\n1,000 jobs: {len(opened)} connections, {worker.pool.commits} transactions, "
          f"{worker.pool.claims} claim statements")


@MARIADB
def test_job_processes_share_the_fork_servers_pages(make_app):
    app = make_app(broker_url=REDIS)
    worker = WorkerProcess(app, ["default"], 8)
    worker.start()
    try:
        queue.dispatch_many([{"type": "test.shape.execute", "payload": {"shape": "true"}}] * 50)
        wait_for(all_completed(app, 50), 60, "50 jobs")
        me = psutil.Process()
        jobs = [p for p in me.children(recursive=True) if p.pid in
                {proc.process.pid for proc in worker.pool._procs}]
        assert len(jobs) == 8
        private = [p.memory_full_info().uss / 1e6 for p in jobs]
        rss = [p.memory_info().rss / 1e6 for p in jobs]
    finally:
        worker.shutdown(10)
    # Forked from a server that imported the engine and handlers: most pages are shared.
    assert max(private) < 0.5 * min(rss), (private, rss)


@MARIADB
def test_thread_isolation_runs_in_the_worker_process_and_process_isolation_does_not(make_app):
    app = make_app(broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, THREAD_HANDLERS))
    job = queue.dispatch("test.threadsleep.execute", {"seconds": 0})
    other = queue.dispatch("test.record.execute", {})
    for isolation, expect_here in (("handler", True), ("process", False)):
        worker = WorkerProcess(app, ["default"], 2, isolation=isolation)
        worker.start()
        try:
            wait_for(lambda: all(queue.get(i, ["status"])["status"] == "completed"
                                 for i in (job, other)), 60, "both jobs")
        finally:
            worker.shutdown(10)
        pid = effect_rows(app, "thread")[-1]["pid"]
        assert (pid == __import__("os").getpid()) is expect_here, isolation
        assert effect_rows(app, "record")[-1]["pid"] != __import__("os").getpid()
        with app.engine.begin() as conn:  # run both again in the other mode
            conn.execute(cronjob_queue.update().values(status="pending", attempts=0))


@MARIADB
def test_a_thread_job_past_max_runtime_is_timed_out_and_the_worker_recycles(make_app, db_url,
                                                                           namespace, tmp_path):
    make_app(broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, THREAD_HANDLERS))
    job_id = queue.dispatch("test.threadsleep.execute", {"seconds": 600})
    log = tmp_path / "worker.log"
    env = cli_env(db_url, namespace, broker_url=REDIS,
                  CRONJOBS_HANDLER_PATHS=f"{SAMPLE_HANDLERS}:{THREAD_HANDLERS}",
                  CRONJOBS_LOG_LEVEL="INFO")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--queues",
                                 "default", "--threads", "2", "--shutdown-timeout", "5"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
        code = proc.wait(timeout=90)
    text = log.read_text()
    assert code == 0, text
    assert "recycling: thread job" in text and "past MAX_RUNTIME" in text
    row = queue.get(job_id)
    assert row["status"] == "pending" and row["attempts"] == 1, row
    assert row["error"].startswith("timeout after 2 s (MAX_RUNTIME); thread job abandoned")


def _results(app, ids: list[int]) -> dict[int, dict]:
    rows = {i: queue.get(i, app=app) for i in ids}
    return {i: (r["status"], r["attempts"], json.loads(r["result_payload"] or "null"))
            for i, r in rows.items()}


@MARIADB
def test_a_forking_handler_or_a_dead_idle_process_never_misattributes_or_costs_an_attempt(
        make_app):
    """A handler whose forked child returns from handle() too: only the job process answers,
    so every later row of that slot gets its own outcome. Job processes killed while idle:
    the next row is put back without using an attempt and runs in a new process."""
    app = make_app(broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, CRASH_HANDLERS))
    job = "test.forkreturn.execute"
    ids = [queue.dispatch(job, {"fork": True}, app=app)]
    ids += [queue.dispatch(job, {}, app=app) for _ in range(5)]
    worker = WorkerProcess(app, ["default"], 1)  # one slot: every row through one process
    worker.start()
    try:
        wait_for(all_completed(app, 6), 60, "6 jobs completed")
        assert _results(app, ids) == {i: ("completed", 1, {"job": i}) for i in ids}
        procs = [p.process for p in worker.pool._procs]
        for proc in procs:
            proc.kill()
            proc.join(5)
        assert procs and not any(p.is_alive() for p in procs)
        late = queue.dispatch(job, {}, max_attempts=1, app=app)
        wait_for(all_completed(app, 7), 60, "the row after the dead process")
        assert _results(app, [late]) == {late: ("completed", 1, {"job": late})}
        assert "attempt not used" in queue.get(late, app=app)["process_logs"]
    finally:
        worker.shutdown(10)


@MARIADB
@pytest.mark.parametrize("max_attempts,status", [(1, "failed"), (3, "pending")])
def test_a_job_cut_off_when_its_worker_recycles_uses_its_attempt(make_app, max_attempts,
                                                                 status):
    """A job still running when a recycling worker's shutdown timeout ends may be why the
    limit was reached (memory): the cut-off uses its attempt, so a job that always
    outlives the limit ends failed instead of being given back forever."""
    app = make_app(broker_url=REDIS)
    job_id = queue.dispatch("test.slow.execute", {"seconds": 60}, max_attempts=max_attempts,
                            app=app)
    worker = WorkerProcess(app, ["default"], 1)
    worker.start()
    try:
        wait_for(lambda: queue.get(job_id, ["status"], app=app)["status"] == "running", 30,
                 "the job to run")
        worker.limits = Limits(memory_mb=1)  # reached at the next check
        worker.check_limits()
        assert worker.recycle_reason.startswith("memory-limit 1 MB reached")
    finally:
        worker.shutdown(0.5)
    row = queue.get(job_id, app=app)
    assert (row["status"], row["attempts"]) == (status, 1), row
    assert row["error"].startswith("cut off when the worker recycled (memory-limit 1 MB "
                                   "reached"), row["error"]
