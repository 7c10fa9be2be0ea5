"""The other production pieces as real processes: a worker on RabbitMQ, and the
`cronjobs scheduler` command (APScheduler) ticking into MariaDB."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from cronjobs import queue
from cronjobs.models import cronjob_queue
from conftest import cli_env
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
def test_worker_on_rabbitmq(make_app, db_url, namespace, amqp_url, tmp_path):
    app = make_app(broker_url=amqp_url)
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=4, broker_url=amqp_url) as proc:
        ids = [queue.dispatch(RECORD, {"tag": i}, app=app, priority=i % 3) for i in range(50)]
        wait_for(all_completed(app, 50), 90, "50 jobs completed over RabbitMQ", proc, log)
    assert len(ids) == 50


@MARIADB
def test_scheduler_command_ticks_and_stops_cleanly(make_app, db_url, tmp_path):
    app = make_app()
    log = tmp_path / "scheduler.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "scheduler"],
                                env=cli_env(db_url, CRONJOBS_LOG_LEVEL="INFO"), stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            def started() -> set:
                with app.engine.connect() as conn:
                    return {r[0] for r in conn.execute(sa.select(cronjob_queue.c.type))}

            types = wait_for(started, 60, "the scheduler's first tick", proc, log)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    assert {"http.uptime.discover", "cronjobs.recoverstale.execute",
            "test.count.discover"} <= types
    assert code == 0, log.read_text()
