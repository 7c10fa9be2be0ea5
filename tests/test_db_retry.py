"""One retry library (tenacity) for every back-off, with transient,
unavailable and refused errors told apart in one place (`cronjobs.store.db.classify`)."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from cronjobs.errors import DatabaseRefused, DatabaseUnavailable, StoreError
from cronjobs.store.db import retry_while_unavailable, run_in_transaction
from cronjobs.store.engines import make_engine
from cronjobs.worker.loop import _restart_pause

UNREACHABLE = "mysql+pymysql://root@127.0.0.1:1/nowhere"


def test_an_unreachable_database_is_waited_for_with_a_growing_pause(caplog):
    engine = make_engine(UNREACHABLE)
    tries = []

    def claim() -> None:
        tries.append(time.monotonic())
        run_in_transaction(engine, lambda conn: conn.execute(sa.text("SELECT 1")))

    with caplog.at_level("WARNING", logger="cronjobs.db"):
        with pytest.raises(DatabaseUnavailable, match="database unavailable: .*2003") as caught:
            retry_while_unavailable(claim, "claiming", give_up_seconds=1.5, first_seconds=0.1,
                                    cap_seconds=0.3)
    pauses = [r.getMessage().rpartition("retrying in ")[2] for r in caplog.records]
    assert pauses[:4] == ["0.1 s", "0.2 s", "0.3 s", "0.3 s"], pauses  # doubling, capped
    assert len(tries) == len(pauses) + 1 >= 5
    assert "[SQL" not in str(caught.value)


def test_a_stopping_worker_ends_the_wait_at_once():
    engine = make_engine(UNREACHABLE)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable):
        retry_while_unavailable(lambda: run_in_transaction(engine, lambda c: None), "claiming",
                                give_up_seconds=None, stop=stop)
    assert time.monotonic() - started < 2, "not the 3 s pause"


def test_a_refused_statement_is_tried_once(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    tries = []

    def bad() -> None:
        tries.append(1)
        run_in_transaction(engine, lambda conn: conn.execute(sa.text("SELECT * FROM missing")))

    with pytest.raises(DatabaseRefused, match="no such table: missing"):
        retry_while_unavailable(bad, "reading", first_seconds=0.01)
    assert tries == [1]


def test_worker_children_restart_with_the_same_library():
    assert [_restart_pause(n) for n in range(8)] == [0, 1, 2, 4, 8, 16, 30, 30]


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_a_committed_transaction_goes_back_to_the_pool_without_a_rollback(db_url):
    """MariaDB: one round trip less per transaction; a failed or read-only use of a
    connection is still rolled back before the next one gets it."""
    engine = make_engine(db_url, pool_size=1)

    def rollbacks(conn) -> int:
        return int(conn.execute(sa.text("SHOW SESSION STATUS LIKE 'Com_rollback'")).one()[1])

    def insert(info: str):
        return lambda conn: conn.execute(
            sa.text("INSERT INTO test_effects (kind, info) VALUES ('rt', :i)"), {"i": info})

    def insert_then_fail(conn) -> None:
        insert("gone")(conn)
        raise RuntimeError("handler bug")

    before = run_in_transaction(engine, rollbacks)
    for i in range(5):
        run_in_transaction(engine, insert(str(i)))
    assert run_in_transaction(engine, rollbacks) == before

    with engine.connect() as conn:  # a read outside run_in_transaction opens a transaction
        conn.execute(sa.text("SELECT COUNT(*) FROM test_effects")).one()
    with pytest.raises(RuntimeError):
        run_in_transaction(engine, insert_then_fail)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT @@in_transaction")).scalar_one() == 0
        infos = conn.execute(sa.text("SELECT info FROM test_effects WHERE kind = 'rt'")).scalars()
        assert sorted(infos) == ["0", "1", "2", "3", "4"]
    engine.dispose()


def test_a_transient_error_runs_the_transaction_again_and_gives_up_after_the_attempts(
        tmp_path):
    """The first try runs outside any retry loop; a transient error (a deadlock, SQLite's
    busy answer) runs the whole transaction again up to `attempts` tries in all; any other
    error is raised at once, unchanged."""
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    calls = []

    def busy_twice(conn):
        calls.append(1)
        if len(calls) <= 2:
            raise StoreError("database is locked")
        return conn.exec_driver_sql("SELECT 7").scalar()

    assert run_in_transaction(engine, busy_twice) == 7 and len(calls) == 3
    calls.clear()
    with pytest.raises(StoreError, match="locked"):
        run_in_transaction(engine, busy_twice, attempts=2)
    assert len(calls) == 2

    def wrong(conn):
        calls.append(1)
        raise ValueError("not a database error")

    calls.clear()
    with pytest.raises(ValueError, match="not a database error"):
        run_in_transaction(engine, wrong)
    assert len(calls) == 1
    engine.dispose()
