"""Dispatch/submit/dispatch_many/get semantics on every backend."""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.errors import InvalidJob
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.store.models import cronjob_queue
from cronjobs.testing import drain

T0 = datetime(2026, 3, 1, 8, 0, 0)


def count_rows(app) -> int:
    with app.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)).scalar_one()


def test_dispatch_returns_id_and_get_reads_columns(make_app):
    make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "true"}, title="Hello ✓ 🚀", priority=3)
    row = queue.get(job_id)
    assert row["status"] == "pending" and row["priority"] == 3 and row["attempts"] == 0
    assert row["title"] == "Hello ✓ 🚀", "title stored as given (utf8mb4 on MariaDB)"
    assert row["created_at"] == T0
    assert queue.get(job_id, ["id", "status"]) == {"id": job_id, "status": "pending"}
    assert queue.get(10**9) is None
    with pytest.raises(InvalidJob, match="unknown column 'nope'"):
        queue.get(job_id, ["nope"])


@pytest.mark.parametrize("kwargs,message", [
    ({"payload": {"when": datetime(2026, 1, 1)}}, "payload is not JSON-serialisable"),
    ({"payload": {"x": float("nan")}}, "payload is not JSON-serialisable"),
    ({"payload": [1, 2]}, "payload must be a JSON object"),
    ({"title": "x" * 256}, "title is 256 characters; the limit is 255"),
    ({"max_attempts": -1}, "max attempts must be an integer from 1 to 2**31-1, got -1"),
    ({"max_attempts": 0}, "max attempts must be an integer from 1 to 2**31-1, got 0"),
    ({"max_attempts": 2**31}, "max attempts must be an integer from 1 to 2**31-1, "
                              "got 2147483648"),
    ({"priority": "high"}, "priority must be an integer"),
    ({"idempotency_key": "k" * 192}, "idempotency key is 192 characters; the limit is 191"),
    ({"idempotency_key": ""}, "idempotency key must be a non-empty string"),
    # MySQL/MariaDB compare keys without trailing spaces: refused everywhere alike.
    ({"idempotency_key": "caseK "}, "idempotency key must not end with a space"),
    ({"parent_id": 10**9}, "parent job 1000000000 does not exist"),
    # Every limit is checked in Python, the same on every backend,
    # and no message shows SQL.
    ({"queue": "q" * 300}, "queue name is 300 characters; the limit is 64"),
    ({"queue": "a b"}, "queue name 'a b' may only contain letters, digits"),
    ({"title": "nul\x00byte"}, "title contains a NUL character"),
    ({"idempotency_key": "bad\udc80surrogate"},
     "idempotency key contains a NUL character or an invalid surrogate"),
    ({"payload": {"blob": "x" * 2_000_000}},
     "payload is 2,000,012 bytes of JSON; the limit is 1,000,000 bytes"),
    # an aware time with no UTC datetime (before year 1, after 9999)
    ({"scheduled_at": datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))},
     "scheduled_at is out of range in UTC, got datetime.datetime(1, 1, 1, 0, 30"),
    ({"scheduled_at": datetime(9999, 12, 31, 20, tzinfo=timezone(timedelta(hours=-5)))},
     "scheduled_at is out of range in UTC"),
])
def test_bad_input_is_refused_and_nothing_written(make_app, kwargs, message):
    app = make_app()
    kwargs = dict(kwargs)
    payload = kwargs.pop("payload", {})
    with pytest.raises(InvalidJob, match=re.escape(message)) as caught:
        queue.dispatch("test.shape.execute", payload, **kwargs)
    assert "SQL" not in str(caught.value) and "\n" not in str(caught.value)
    assert count_rows(app) == 0


def test_a_long_job_type_is_refused_on_every_backend(make_app):
    app = make_app()
    with pytest.raises(InvalidJob, match="job type is 200 characters; the limit is 160"):
        queue.dispatch("a" * 192 + ".execute", {})
    assert count_rows(app) == 0


def test_keys_are_compared_alike_on_every_backend(make_app):
    # Case, a leading space and a trailing tab make another key on every backend (only a
    # trailing space would not on MySQL/MariaDB: such keys are refused).
    make_app()
    keys = ["caseK", "casek", " caseK", "caseK\t"]
    ids = [queue.dispatch("test.shape.execute", {}, idempotency_key=k) for k in keys]
    assert len(set(ids)) == len(keys)
    assert [queue.dispatch("test.shape.execute", {}, idempotency_key=k) for k in keys] == ids


def test_idempotency_key_returns_existing_row(make_app):
    app = make_app()
    first = queue.submit("test.shape.execute", {"shape": "true"}, idempotency_key="k1")
    again = queue.submit("test.shape.execute", {"shape": "true"}, idempotency_key="k1")
    other = queue.submit("test.shape.execute", {"shape": "false"}, idempotency_key="k1")
    assert first.created and not again.created and not other.created
    assert first.id == again.id == other.id
    assert again.payload_matches and not other.payload_matches
    assert count_rows(app) == 1
    InlineRunner(Executor(app)).run_id(first.id)
    done = queue.submit("test.shape.execute", {"shape": "true"}, idempotency_key="k1")
    assert (done.id, done.created, done.status) == (first.id, False, "completed")


def test_dispatch_many_keeps_input_order(make_app):
    app = make_app()
    sent = []
    app.broker.listen(lambda job_id, q, delay: sent.append(job_id))
    ids = queue.dispatch_many([{"type": "test.shape.execute", "payload": {"shape": "true", "n": n},
                                "priority": 9 - n % 3} for n in range(50)])
    assert len(ids) == 50 and len(set(ids)) == 50
    for n, job_id in enumerate(ids):
        assert queue.get(job_id)["payload"] == f'{{"n": {n}, "shape": "true"}}'
    # Messages ring queues (a worker claims the best rows for all its idle slots): a
    # batch sends at most 16 per queue for rows due now, and one per row due later.
    assert sent == ids[:16]
    sent.clear()
    later = datetime(2030, 1, 1)
    more = queue.dispatch_many([{"type": "test.shape.execute", "queue": "other"}] * 20
                               + [{"type": "test.shape.execute", "scheduled_at": later}] * 3)
    assert sent == more[:16] + more[20:]


def test_dispatch_many_stores_every_value_exactly_across_statements(make_app):
    """Quotes, backslashes, %-signs, NUL-free control text, emoji and Persian, times and
    parents come back as sent; 2,500 rows of ~2 KB span several INSERT statements (MariaDB
    writes them as literal multi-row SQL) and keep input order; a missing parent refuses the
    whole batch."""
    app = make_app()
    parent = queue.dispatch("test.shape.execute", {})
    odd = "it's \\ \"q\" %s %(x)s \n\t ; -- DROP TABLE x; 🚀 سلام"
    later = datetime(2031, 2, 3, 4, 5, 6, 789000)
    jobs = [{"type": "test.shape.execute", "payload": {"n": n, "text": odd, "pad": "p" * 2000},
             "title": odd if n % 2 else None, "parent_id": parent if n % 3 == 0 else None,
             "scheduled_at": later if n % 5 == 0 else None} for n in range(2500)]
    ids = queue.dispatch_many(jobs)
    assert len(set(ids)) == 2500 and ids == sorted(ids)
    for n in (0, 1, 2, 3, 5, 1499, 2499):
        row = queue.get(ids[n])
        assert json.loads(row["payload"]) == jobs[n]["payload"]
        assert row["title"] == jobs[n]["title"]
        assert row["parent_id"] == jobs[n]["parent_id"]
        assert row["scheduled_at"] == jobs[n]["scheduled_at"]
    before = count_rows(app)
    with pytest.raises(InvalidJob, match="refused"):
        queue.dispatch_many([{"type": "test.shape.execute"},
                             {"type": "test.shape.execute", "parent_id": 10**12}])
    assert count_rows(app) == before


def test_dispatch_many_with_keys_reuses_existing(make_app):
    make_app()
    first = queue.dispatch("test.shape.execute", {}, idempotency_key="a")
    ids = queue.dispatch_many([{"type": "test.shape.execute", "idempotency_key": "a"},
                               {"type": "test.shape.execute", "idempotency_key": "b"}])
    assert ids[0] == first and ids[1] != first


def test_dispatch_many_with_keys_is_one_transaction(make_app):
    """Keyed rows are inserted one by one, but a refused row still undoes the whole batch."""
    app = make_app()
    queue.dispatch("test.shape.execute", {}, idempotency_key="held")
    before = count_rows(app)
    with pytest.raises(InvalidJob, match="parent job 999999999 does not exist"):
        queue.dispatch_many([{"type": "test.shape.execute", "idempotency_key": f"k{n}"}
                             for n in range(5)]
                            + [{"type": "test.shape.execute", "idempotency_key": "held"},
                               {"type": "test.shape.execute", "parent_id": 999999999}])
    assert count_rows(app) == before


def test_dispatch_many_refuses_all_when_one_is_bad(make_app):
    app = make_app()
    with pytest.raises(InvalidJob):
        queue.dispatch_many([{"type": "test.shape.execute"},
                             {"type": "test.shape.execute", "title": "x" * 300}])
    assert count_rows(app) == 0


def test_scheduled_at_holds_the_job(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    sent = []
    app.broker.listen(lambda job_id, q, delay: sent.append(delay))
    later = datetime(2026, 3, 1, 10, 0, tzinfo=timezone(timedelta(hours=1)))  # 09:00 UTC
    job_id = queue.dispatch("test.shape.execute", {"shape": "true"}, scheduled_at=later)
    assert queue.get(job_id)["scheduled_at"] == datetime(2026, 3, 1, 9, 0)
    assert sent == [3600.0], "the message is delayed until the row is due"
    assert InlineRunner(Executor(app)).run_next("default") is None
    clock.set(datetime(2026, 3, 1, 9, 0))
    assert InlineRunner(Executor(app)).run_next("default").id == job_id


def test_deleting_a_parent_deletes_its_children(make_app):
    app = make_app()
    parent = queue.dispatch("test.shape.execute", {})
    child = queue.dispatch("test.shape.execute", {}, parent_id=parent)
    grandchild = queue.dispatch("test.shape.execute", {}, parent_id=child)
    other = queue.dispatch("test.shape.execute", {})
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.delete().where(cronjob_queue.c.id == parent))
    assert queue.get(child) is None and queue.get(grandchild) is None
    assert queue.get(other) is not None


def test_session_rollback_writes_nothing_and_sends_nothing(make_app):
    app = make_app()
    sent = []
    app.broker.listen(lambda job_id, q, delay: sent.append(job_id))
    with Session(app.engine) as session:
        job_id = queue.dispatch("test.shape.execute", {}, session=session)
        assert sent == []
        session.rollback()
    assert sent == [] and queue.get(job_id) is None and count_rows(app) == 0


def test_session_commit_sends_after_commit(make_app):
    app = make_app()
    events = []
    app.broker.listen(lambda job_id, q, delay: events.append(
        ("send", job_id, queue.get(job_id) is not None)))
    with Session(app.engine) as session:
        sa.event.listen(session, "after_commit", lambda s: events.append(("commit",)))
        ids = [queue.dispatch("test.shape.execute", {"n": n}, session=session) for n in range(2)]
        ids.append(queue.dispatch_many([{"type": "test.shape.execute"}], session=session)[0])
        assert events == []
        session.commit()
    assert events[0] == ("commit",)
    assert events[1:] == [("send", i, True) for i in ids], "sent after commit, row visible"


def test_in_process_broker_carries_the_id_and_drain_runs_the_job(make_app):
    """The embedded default: the row id goes to the in-process broker's queue, and
    `testing.drain` runs the due row here (as `queue.process` runs one by id)."""
    app = make_app()
    job_id = queue.dispatch("test.shape.execute", {"shape": "dict_ok"})
    other = queue.dispatch("test.shape.execute", {"shape": "true"})
    messages = list(app.broker.dramatiq.queues["default"].queue)
    assert [json.loads(m)["args"] for m in messages] == [[job_id], [other]]
    report = drain(app)
    assert report.statuses() == {job_id: "completed", other: "completed"}
    assert queue.get(job_id)["status"] == "completed"


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_a_connection_dropped_by_the_server_is_replaced(make_app, caplog):
    """No ping before each transaction: a dead pooled connection is detected on use and
    the transaction is retried on a new one."""
    app = make_app()
    first = queue.dispatch("test.shape.execute", {})
    with app.autocommit_engine.connect() as conn:  # the pool a dispatch takes it from
        if app.engine.dialect.name == "postgresql":
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            kill = f"SELECT pg_terminate_backend({pid})"
        else:
            pid = conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
            kill = f"KILL {pid}"
    admin = sa.create_engine(app.settings.database_url, poolclass=sa.pool.NullPool)
    with admin.begin() as conn:
        conn.exec_driver_sql(kill)
    admin.dispose()
    with caplog.at_level("DEBUG", logger="cronjobs.db"):
        second = queue.dispatch("test.shape.execute", {})
    assert "transient database error, retrying" in caplog.text, "the dead connection was used"
    assert second > first and queue.get(second)["status"] == "pending"


def test_ids_are_never_reused(make_app):
    app = make_app()
    first = queue.dispatch("test.shape.execute", {})
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.delete().where(cronjob_queue.c.id == first))
    assert queue.dispatch("test.shape.execute", {}) > first


def test_a_dispatch_outside_a_transaction_is_one_statement_that_commits_itself(make_app):
    """Keyed dispatch on a connection in autocommit mode: the INSERT commits itself (no
    BEGIN, no COMMIT round trip); a taken key still gives its holder's id. SQLite: the
    same pool, without the BEGIN IMMEDIATE its transactions start with; a new row is one
    statement on the driver's connection, a taken key's read goes through SQLAlchemy."""
    app = make_app()
    dialect = app.engine.dialect.name
    on_insert, statements, traced = [], [], []
    if dialect == "sqlite":  # every statement the driver runs, SQLAlchemy's or not
        sa.event.listen(app.engine, "checkout",
                        lambda dbapi, *_: dbapi.set_trace_callback(traced.append))

    def seen(conn, _cursor, statement, *_args):
        statements.append(statement.split()[0])
        if statement.startswith("INSERT"):
            dbapi = conn.connection.dbapi_connection
            on_insert.append(dbapi.get_autocommit() if dialect == "mysql"
                             else not dbapi.in_transaction if dialect == "sqlite"
                             else getattr(dbapi, "autocommit", None))

    sa.event.listen(app.autocommit_engine, "before_cursor_execute", seen)
    first = queue.dispatch("test.shape.execute", {"n": 1}, idempotency_key="one")
    second = queue.dispatch("test.shape.execute", {"n": 2}, idempotency_key="two")
    assert queue.dispatch("test.shape.execute", {"n": 1}, idempotency_key="one") == first
    other = sa.create_engine(app.settings.database_url, poolclass=sa.pool.NullPool)
    with other.connect() as conn:  # committed: another connection sees them
        ids = conn.exec_driver_sql("SELECT id FROM cronjob_queue ORDER BY id").scalars().all()
    other.dispose()
    assert ids == [first, second]
    if dialect == "sqlite":  # no transaction open at the INSERT: it commits itself
        # Two new rows, then the taken key: the driver's INSERT found it taken, the
        # general path reads the holder.
        assert [t.split()[0] for t in traced] == ["INSERT"] * 3 + ["SELECT"]
        assert on_insert == [] and statements == ["SELECT"]
        statements.clear()
        sa.event.listen(app.engine, "before_cursor_execute", seen)
        with app.engine.begin() as conn:  # the App's other transactions keep their BEGIN
            conn.exec_driver_sql("SELECT 1")
        assert statements == ["BEGIN", "SELECT"]
        return
    assert len(on_insert) == 3
    if dialect == "postgresql":  # psycopg: autocommit on the client, for that use only
        assert on_insert == [True] * 3
        with app.engine.connect() as conn:
            assert conn.connection.dbapi_connection.autocommit is False
    else:  # PyMySQL: a pool whose connections are in autocommit mode; no COMMIT sent
        assert on_insert == [True] * 3
        with app.autocommit_engine.connect() as conn:
            sent = dict(conn.exec_driver_sql(
                "SHOW SESSION STATUS WHERE Variable_name IN ('Com_commit', 'Com_rollback', "
                "'Com_begin')").all())
        assert sent == {"Com_begin": "0", "Com_commit": "0", "Com_rollback": "0"}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_new_rows_on_the_driver_connection_commit_and_fall_back(make_app, db_url):
    """SQLite's keyed dispatch inserts a new row on the pool's driver connection. On an
    engine of the caller's (the driver's own implicit BEGIN) the row is still committed;
    a row the database refuses takes the general path, which maps the error; a database
    held by another writer for a moment is waited out; nothing half-written is left."""
    from cronjobs.app import App, use

    app = make_app()
    theirs = App(app.settings, engine=sa.create_engine(db_url, poolclass=sa.pool.NullPool),
                 handlers=app.handlers)
    use(theirs)
    try:
        new = queue.dispatch("test.shape.execute", {"n": 1}, idempotency_key="theirs")
        assert queue.dispatch("test.shape.execute", {"n": 1}, idempotency_key="theirs") == new
    finally:
        use(app)
        theirs.close()
    other = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with other.connect() as conn:  # committed: another connection sees it
        assert conn.exec_driver_sql("SELECT id FROM cronjob_queue").scalars().all() == [new]
    with pytest.raises(InvalidJob, match="parent job 12345 does not exist"):
        queue.dispatch("test.shape.execute", {}, parent_id=12345, idempotency_key="orphan")
    with other.connect() as conn:  # a writer holds the database for 0.3 s
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        threading.Timer(0.3, conn.rollback).start()
        waited = queue.dispatch("test.shape.execute", {"n": 2}, idempotency_key="waited")
    other.dispose()
    assert count_rows(app) == 2 and queue.get(waited)["status"] == "pending"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_driver_path_keeps_the_errors_and_the_ids_of_the_general_path(make_app,
                                                                              tmp_path):
    """What the driver's connection raises before any insert (a file that cannot be
    opened, no pooled connection free) is the same error as on the general path; a taken
    key uses up one id, as an insert that finds it taken always did (the holder is read,
    not inserted for again)."""
    from cronjobs.app import App
    from cronjobs.errors import DatabaseUnavailable
    from cronjobs.store.engines import make_engine

    app = make_app()
    queue.dispatch("test.shape.execute", {}, idempotency_key="held")
    with app.engine.connect() as conn:
        before = conn.exec_driver_sql("SELECT seq FROM sqlite_sequence").scalar_one()
    for _ in range(3):
        queue.dispatch("test.shape.execute", {}, idempotency_key="held")
    with app.engine.connect() as conn:
        after = conn.exec_driver_sql("SELECT seq FROM sqlite_sequence").scalar_one()
    assert after - before == 3  # one per taken key, not two
    (tmp_path / "a-directory.db").mkdir()
    unopenable = App(app.settings, handlers=app.handlers,
                     engine=make_engine(f"sqlite:///{tmp_path / 'a-directory.db'}"))
    with pytest.raises(DatabaseUnavailable, match="unable to open database file"):
        queue.dispatch("test.shape.execute", {}, app=unopenable)
    unopenable.close()
    small = App(app.settings, handlers=app.handlers,
                engine=make_engine(app.settings.database_url, pool_size=1,
                                   pool_timeout_seconds=0.2))
    with small.engine.connect(), small.engine.connect():  # the pool and its overflow
        with pytest.raises(DatabaseUnavailable):
            queue.dispatch("test.shape.execute", {}, app=small)
    small.close()
    assert count_rows(app) == 1
