"""Size limits are checked in Python, the same on every backend; a
statement the database refuses is never retried as an outage; no message shows SQL."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
import sqlalchemy as sa

from conftest import cli_env, run_cli
from cronjobs import limits, queue
from cronjobs.clock import FrozenClock
from cronjobs.errors import DatabaseRefused
from cronjobs.store.db import classify, run_in_transaction
from cronjobs.store.models import cronjob_queue as q
from cronjobs.testing import drain

T0 = datetime(2026, 6, 1, 12, 0, 0)
SERVERS = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)


def test_a_multi_megabyte_exception_is_cut_not_retried_as_an_outage(make_app, db_url, backend):
    """`cronjobs run` of a handler that raises a 5 MB message returns at once; the row is
    retried as a normal failure with its error and log line cut (marker included)."""
    make_app()
    job_id = queue.dispatch("test.shape.execute", {"shape": "raise_big", "size": 5_000_000})
    started = time.monotonic()
    done = run_cli(["run", str(job_id)], cli_env(db_url, CRONJOBS_LOG_LEVEL="INFO"), timeout=60)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"job {job_id} (test.shape.execute): pending" in done.stdout
    assert len(done.stderr) < 20_000, "log lines are cut"
    assert "database unavailable" not in done.stderr
    row = queue.get(job_id)
    assert row["status"] == "pending" and row["attempts"] == 1
    assert len(row["error"].encode()) <= limits.ERROR_MAX_BYTES
    assert row["error"].startswith("ValueError: big xxx") and "[cut: 5,000," in row["error"]
    line = row["process_logs"].splitlines()[0]
    assert len(line) <= limits.LOG_LINE_MAX_CHARS and "[cut:" in line
    print(f"\nrun of a 5 MB exception on {backend}: {took:.1f} s")


def test_nul_surrogates_and_persian_in_an_error_are_stored(make_app):
    make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "raise_big", "size": 10})
    queue.process(job_id)
    error = queue.get(job_id)["error"]
    assert error.endswith("\\0? سلام 🎉 end"), error


def test_the_process_log_stays_bounded_and_keeps_the_newest_lines(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "retry_later", "delay": 0,
                                                   "reason": "r" * 900})
    assert len(drain(app, limit=200)) == 200, "put back 200 times (about 190 KB of lines)"
    row = queue.get(job_id)
    logs = row["process_logs"]
    assert row["status"] == "pending" and row["attempts"] == 0, "RetryLater uses no attempt"
    assert len(logs.encode()) <= limits.LOG_MAX_BYTES
    assert logs.startswith(limits.LOG_DROPPED)
    kept = logs.splitlines()[1:]
    assert len(kept) > 20 and all(line.startswith("[2026-06-01 12:00:00]") for line in kept)
    assert all("retry later in 0 s: rrr" in line for line in kept), "whole lines only"


@SERVERS
def test_a_refused_write_is_not_retried_as_an_outage(make_app, backend):
    """Shrink the error column so the database refuses the outcome: the worker does not
    wait 10 minutes for an 'outage'; the run ends at once with a one-line error."""
    app = make_app(clock=FrozenClock(T0))
    alter = ("ALTER TABLE cronjob_queue MODIFY error VARCHAR(20)" if backend == "mariadb"
             else "ALTER TABLE cronjob_queue ALTER COLUMN error TYPE VARCHAR(20)")
    with app.engine.begin() as conn:
        conn.exec_driver_sql(alter)
    job_id = queue.dispatch("test.shape.execute", {"shape": "raise"})
    started = time.monotonic()
    with pytest.raises(DatabaseRefused) as caught:
        queue.process(job_id)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert message.startswith("database refused the statement: ")
    assert "SQL" not in message and "UPDATE" not in message and "\n" not in message


@SERVERS
def test_errors_are_classified_from_real_servers(make_app, backend):
    app = make_app()
    with pytest.raises(DatabaseRefused, match="database refused the statement") as caught:
        run_in_transaction(app.engine, lambda c: c.execute(
            q.insert().values(type="t.execute", queue="q" * 300, status="pending",
                              created_at=T0, updated_at=T0)))
    assert "[SQL" not in str(caught.value)
    assert classify(caught.value.__cause__) == "refused"
    closed = sa.create_engine(app.settings.database_url.replace(
        ":3306" if backend == "mariadb" else ":5432", ":1"), poolclass=sa.pool.NullPool)
    with pytest.raises(sa.exc.OperationalError) as down:
        closed.connect()
    assert classify(down.value) == "unavailable"


@SERVERS
def test_a_lock_wait_timeout_is_transient(make_app, backend):
    app = make_app()
    job_id = queue.dispatch("test.shape.execute", {})
    holder = app.engine.connect()
    tx = holder.begin()
    holder.execute(q.update().where(q.c.id == job_id).values(priority=1))
    try:
        with app.engine.connect() as waiter:
            waiter.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 1"
                                   if backend == "mariadb" else "SET lock_timeout = '200ms'")
            with pytest.raises(sa.exc.DBAPIError) as caught:
                waiter.execute(q.update().where(q.c.id == job_id).values(priority=2))
    finally:
        tx.rollback()
        holder.close()
    assert classify(caught.value) == "transient"


def test_sqlite_errors_and_non_database_errors(tmp_path):
    assert classify(ValueError("x")) is None
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'x.db'}", connect_args={"timeout": 0.1},
                              poolclass=sa.pool.NullPool)
    with pytest.raises(sa.exc.OperationalError) as caught:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT * FROM nowhere")
    assert classify(caught.value) == "refused"
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x)")
        conn.commit()
    holder = engine.raw_connection()
    holder.cursor().execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sa.exc.OperationalError) as busy:
            with engine.begin() as conn:
                conn.exec_driver_sql("INSERT INTO t VALUES (1)")
    finally:
        holder.rollback()
        holder.close()
    assert classify(busy.value) == "transient"


def test_a_server_with_a_small_packet_limit_is_refused_at_connect(tmp_path):
    """A MariaDB whose max_allowed_packet is below what the limits need would drop the
    connection ("gone away") on a big row, which looks like an outage: refuse it at the
    first connection with a one-line ConfigError instead."""
    import subprocess

    from cronjobs.errors import ConfigError
    from cronjobs.store.engines import make_engine
    from test_faults import OwnMariaDB

    class SmallPacketMariaDB(OwnMariaDB):
        port = 3308

        def start(self) -> None:
            self.proc = subprocess.Popen(
                ["mariadbd", "--no-defaults", f"--datadir={self.folder}/data",
                 f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.folder}/sock",
                 "--user=root", f"--log-error={self.folder}/err.log",
                 "--innodb-buffer-pool-size=16M", "--max-allowed-packet=1M"])
            from test_faults import _wait

            _wait(self.ping, 60, "mariadb to start")

    server = SmallPacketMariaDB(tmp_path / "mariadb")
    server.start()
    try:
        engine = make_engine(server.url("mysql"))
        with pytest.raises(ConfigError, match=r"max_allowed_packet is 1,048,576 bytes; cronjobs "
                                              r"needs at least 4,194,304"):
            engine.connect()
        engine.dispose()
    finally:
        server.stop()
