"""The other production pieces as real processes: a worker on RabbitMQ, and the
`cronjobs scheduler` command (APScheduler) ticking into MariaDB."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from conftest import cli_env, effect_rows
from cronjobs import queue
from cronjobs.store.models import cronjob_queue
from test_faults import report
from test_worker_e2e import RECORD, all_completed, wait_for, worker

MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture
def amqp_url():
    """A RabbitMQ virtual host of this test (deleted afterwards), as an amqp:// URL."""
    vhost = "cjt-" + uuid.uuid4().hex[:10]
    rabbitmqctl("add_vhost", vhost)
    rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    rabbitmqctl("delete_vhost", vhost)


@MARIADB
def test_worker_on_rabbitmq_500_jobs(make_app, db_url, namespace, amqp_url, tmp_path):
    app = make_app(broker_url=amqp_url)
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=8, broker_url=amqp_url) as proc:
        ids = queue.dispatch_many([{"type": RECORD, "payload": {"tag": i}} for i in range(500)],
                                  app=app)
        wait_for(all_completed(app, 500), 120, "500 jobs completed over RabbitMQ", proc, log)
    assert sorted(e["job_id"] for e in effect_rows(app, "record")) == ids, "each ran once"


@MARIADB
def test_rabbitmq_one_thread_runs_by_priority_then_age(make_app, db_url, namespace, amqp_url,
                                                       tmp_path):
    app = make_app(broker_url=amqp_url)
    rng = random.Random(7)
    priorities = {queue.dispatch(RECORD, {"tag": i}, priority=rng.randint(1, 9), app=app): 0
                  for i in range(100)}
    rows = {r["id"]: r["priority"] for r in (queue.get(i, ["id", "priority"], app=app)
                                             for i in priorities)}
    expected = sorted(rows, key=lambda job_id: (rows[job_id], job_id))
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=1, broker_url=amqp_url) as proc:
        wait_for(all_completed(app, 100), 90, "100 jobs completed", proc, log)
    assert [e["job_id"] for e in effect_rows(app, "record")] == expected


@MARIADB
def test_rabbitmq_queue_purged_mid_run_nothing_lost(make_app, db_url, namespace, amqp_url,
                                                    tmp_path):
    """The RabbitMQ counterpart of a Redis flush: the queue's messages are purged in the
    middle of the run; the sweep resends the rows."""
    app = make_app(broker_url=amqp_url)
    log = tmp_path / "worker.log"
    vhost = amqp_url.rsplit("/", 1)[1]
    ids = queue.dispatch_many([{"type": "test.slow.execute", "payload": {"seconds": 0.02}}
                               for _ in range(600)], app=app)
    with worker(db_url, namespace, log, threads=4, broker_url=amqp_url,
                CRONJOBS_SWEEP_INTERVAL_SECONDS="1", CRONJOBS_SWEEP_AFTER_SECONDS="3") as proc:
        wait_for(lambda: len(effect_rows(app, "slow")) >= 100, 60, "100 jobs done", proc, log)
        rabbitmqctl("purge_queue", "-p", vhost, "default")
        wait_for(all_completed(app, 600), 120, "all 600 jobs after the purge", proc, log)
    assert report(app, "rabbitmq-purge", 600, "1 queue purge") == (0, 0, 0)
    assert sorted({e["job_id"] for e in effect_rows(app, "slow")}) == sorted(ids)


@MARIADB
def test_scheduler_command_ticks_and_stops_cleanly(make_app, db_url, tmp_path):
    app = make_app()
    log = tmp_path / "scheduler.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "scheduler"],
                                env=cli_env(db_url, CRONJOBS_LOG_LEVEL="INFO"), stdout=out,
                                stderr=subprocess.STDOUT)
        expected = {"cronjobs.recoverstale.execute",  # (the uptime task: idle, no URL)
                    "test.count.discover"}
        try:
            def started() -> set | None:
                # The whole first tick, not its first row: one row per task with a
                # frequency (a tick inserts them one task after another).
                with app.engine.connect() as conn:
                    types = {r[0] for r in conn.execute(sa.select(cronjob_queue.c.type))}
                return types if expected <= types else None

            types = wait_for(started, 60, "every task of the scheduler's first tick", proc, log)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    assert expected <= types
    assert code == 0, log.read_text()
