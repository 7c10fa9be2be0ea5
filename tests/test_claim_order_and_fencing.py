"""Claiming: priority then age within a queue; a row runs at most once at a time; outcomes
are fenced by the run's attempt."""

from __future__ import annotations

import random
from datetime import datetime

import pytest
import sqlalchemy as sa

from cronjobs import queue, store
from cronjobs.clock import FrozenClock
from cronjobs.errors import OutcomesFenced
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.store.models import cronjob_queue

pytestmark = pytest.mark.core  # the core subset (make test-core)

T0 = datetime(2026, 2, 2, 2, 2, 2)


def test_run_next_takes_priority_then_age(make_app):
    app = make_app(clock=FrozenClock(T0))
    rng = random.Random(7)
    ids = [(rng.randint(1, 9), queue.dispatch("test.shape.execute", {"shape": "true"},
                                              priority=0)) for _ in range(30)]
    for priority, job_id in ids:
        with app.engine.begin() as conn:
            conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id)
                         .values(priority=priority))
    order, runner = [], InlineRunner(Executor(app))
    while (report := runner.run_next("default")) is not None:
        order.append(report.id)
    assert order == [job_id for _, job_id in sorted(ids)]


def test_queues_are_separate(make_app):
    app = make_app(clock=FrozenClock(T0))
    a = queue.dispatch("test.shape.execute", {"shape": "true"}, queue="a")
    assert InlineRunner(Executor(app)).run_next("default") is None
    assert InlineRunner(Executor(app)).run_next("a").id == a


def test_a_row_is_claimed_once(make_app):
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "true"})
    one, two = Executor(app, "w:1"), Executor(app, "w:2")
    with app.engine.begin() as conn:
        [first] = one.claim_rows(conn, T0, job_id=job_id).rows
    with app.engine.begin() as conn:
        assert two.claim_rows(conn, T0, job_id=job_id).rows == []
        assert two.claim_rows(conn, T0, queue="default", limit=5).rows == []
    assert first["status"] == "running" and first["attempts"] == 1
    row = queue.get(job_id)
    assert row["worker_id"] == "w:1" and row["attempts"] == 1


def test_stale_run_cannot_overwrite_a_newer_run(make_app):
    """A worker whose lease was taken finishes late: its outcome is dropped."""
    app = make_app(clock=FrozenClock(T0))
    job_id = queue.dispatch("test.shape.execute", {"shape": "true"})
    with app.engine.begin() as conn:
        Executor(app, "old:1").claim_rows(conn, T0, job_id=job_id)
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id)
                     .values(status="pending"))  # as recover_stale would
        Executor(app, "new:2").claim_rows(conn, T0, job_id=job_id)
    with app.engine.begin() as conn:
        assert not store.finish_job(conn, job_id, 1, {"status": "failed"})
        assert store.finish_job(conn, job_id, 2, {"status": "completed"})
    assert queue.get(job_id)["status"] == "completed"


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_finish_many_writes_each_row_its_own_values_and_fences_lost_runs(make_app):
    """The worker's group commit: outcomes of several runs in one UPDATE, each row with
    its own values (None and times included); a batch with a run that lost its row is
    refused whole (`OutcomesFenced`, its transaction rolled back): written one by one,
    the lost run writes nothing and the others are written."""
    from datetime import timedelta

    app = make_app(clock=FrozenClock(T0))
    ids = [queue.dispatch("test.shape.execute", {"n": n}) for n in range(4)]
    with app.engine.begin() as conn:
        rows = Executor(app, "w:1").claim_rows(conn, T0, queue="default", limit=10).rows
    assert [r["id"] for r in rows] == ids and all(r["attempts"] == 1 for r in rows)
    with app.engine.begin() as conn:  # as recover_stale and a new claim would: attempt 2
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == ids[3])
                     .values(attempts=2))
    later = T0 + timedelta(minutes=2)
    items = [(ids[0], 1, {"status": "completed", "finished_at": T0, "error": None,
                          "process_logs": "a\n"}),
             (ids[1], 1, {"status": "pending", "scheduled_at": later, "error": "boom",
                          "process_logs": "b\n"}),
             (ids[2], 1, {"status": "failed", "finished_at": T0, "result_payload": '{"x": 1}',
                          "error": "ö 🎉"}),
             (ids[3], 1, {"status": "completed", "finished_at": T0})]
    with pytest.raises(OutcomesFenced, match=r"1 of 4 runs no longer hold their rows"), \
            app.engine.begin() as conn:
        store.finish_many(conn, items)
    assert [queue.get(i)["status"] for i in ids] == ["running"] * 4, "rolled back whole"
    sent: list[str] = []
    sa.event.listen(app.engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    with app.engine.begin() as conn:
        conn.exec_driver_sql("SELECT 1")  # the transaction's start, whatever the database
        sent.clear()
        assert store.finish_many(conn, items[:3]) == set(ids[:3])
        assert len(sent) == 1 and sent[0].startswith(("UPDATE cronjob_queue SET ",
                                                      "UPDATE cronjob_queue AS q SET ")), sent
        assert not store.finish_job(conn, *items[3])  # alone, the lost run writes nothing
    got = {i: queue.get(i) for i in ids}
    assert (got[ids[0]]["status"], got[ids[0]]["error"], got[ids[0]]["process_logs"]) == \
        ("completed", None, "a\n")
    assert (got[ids[1]]["status"], got[ids[1]]["scheduled_at"], got[ids[1]]["error"]) == \
        ("pending", later, "boom")
    assert (got[ids[2]]["status"], got[ids[2]]["result_payload"], got[ids[2]]["error"]) == \
        ("failed", '{"x": 1}', "ö 🎉")
    assert got[ids[2]]["process_logs"] is None, "a column a row does not set is left alone"
    assert got[ids[3]]["status"] == "running", "the lost run wrote nothing"


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_finish_many_shares_what_every_row_sets_alike_and_keeps_one_text_per_columns(make_app):
    """Batches of outcomes as a draining worker writes them: the same columns, mostly the
    same values (status, NULLs), each row's own times and log. Each row gets its values,
    whatever the batch's size. On PostgreSQL the statement's text depends only on the
    columns (arrays carry the values): one text for batches of 2, 3 and 5 rows."""
    from datetime import timedelta

    app = make_app(clock=FrozenClock(T0))
    ids = [queue.dispatch("test.shape.execute", {"n": n}) for n in range(10)]
    with app.engine.begin() as conn:
        Executor(app, "w:1").claim_rows(conn, T0, queue="default", limit=10)

    def outcome(n: int) -> dict:
        return {"status": "completed", "finished_at": T0 + timedelta(seconds=n),
                "error": None, "locked_until": None, "process_logs": f"run {n}\n"}

    sent: list[str] = []
    texts: set[str] = set()
    sa.event.listen(app.engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    for batch in (ids[:2], ids[2:5], ids[5:]):
        with app.engine.begin() as conn:
            sent.clear()
            assert store.finish_many(conn, [(i, 1, outcome(i)) for i in batch]) == set(batch)
            updates = [s for s in sent if s.startswith("UPDATE")]
            assert len(updates) == 1, sent
            texts.add(updates[0])
    if app.engine.dialect.name == "postgresql":
        assert len(texts) == 1, texts
    for i in ids:
        row = queue.get(i)
        assert (row["status"], row["finished_at"], row["process_logs"], row["error"],
                row["locked_until"]) == ("completed", T0 + timedelta(seconds=i), f"run {i}\n",
                                         None, None), row


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_finish_many_refuses_a_value_too_long_for_its_column_as_finish_job_does(make_app):
    """A batch never cuts a value to fit its column (PostgreSQL cuts on an explicit cast
    to VARCHAR(n)): it is refused whole, as the same outcome written alone is, and the
    worker falls back to writing the outcomes one by one."""
    from cronjobs import limits

    app = make_app(clock=FrozenClock(T0))
    ids = [queue.dispatch("test.shape.execute", {"n": n}) for n in range(2)]
    with app.engine.begin() as conn:
        Executor(app, "w:1").claim_rows(conn, T0, queue="default", limit=10)
    too_long = "r" * (limits.REASON_MAX_CHARS + 8)
    items = [(i, 1, {"status": "completed", "finished_at": T0, "outcome_reason": too_long})
             for i in ids]
    for write in (lambda conn: store.finish_many(conn, items),
                  lambda conn: store.finish_job(conn, *items[0])):
        with pytest.raises(sa.exc.DBAPIError), app.engine.begin() as conn:
            write(conn)
    assert [queue.get(i)["status"] for i in ids] == ["running", "running"]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_postgresql_finds_the_claimed_and_finished_rows_by_id_on_statistics_older_than_a_burst(
        make_app):
    """The table is analyzed while empty, then a burst of rows arrives (autovacuum would
    analyze it a minute or more later). On those statistics the planner takes `status =
    'pending'` for a few rows (and the table, from its size on disk, for 20,000): the
    claim's UPDATE written that way scans every pending row through a status index (the
    control below). The claim's and the outcome batch's UPDATEs find their rows by the
    primary key whatever the statistics say."""
    from datetime import timedelta

    app = make_app(clock=FrozenClock(T0))
    with app.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE cronjob_queue")
    queue.dispatch_many([{"type": "test.shape.execute", "payload": {"n": n}}
                         for n in range(20000)])  # a table a sequential scan would cost
    sent: list[tuple[str, dict]] = []
    sa.event.listen(app.engine, "before_cursor_execute",
                    lambda conn, cursor, sql, params, *rest: sent.append((sql, params)))

    def plan(conn, sql: str, params: dict) -> str:
        return "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql, params))

    with app.engine.begin() as conn:
        claimed = Executor(app, "w:1").claim_rows(conn, T0, queue="default", limit=10).rows
        update, params = next((s, p) for s, p in sent if s.startswith("UPDATE"))
        assert len(claimed) == 10 and "= ANY(" in update
        chosen = plan(conn, update, params)
        assert "cronjob_queue_pkey" in chosen and "ix_cronjob_queue" not in chosen, chosen
        ids = ", ".join(str(row["id"]) for row in claimed)
        control = update.replace("id = ANY(%(ids)s::bigint[]) AND status || ''",
                                 f"id IN ({ids}) AND status")
        assert "ix_cronjob_queue" in plan(conn, control, params), "the statistics are not stale"
    sent.clear()
    done = {"status": "completed", "finished_at": T0 + timedelta(seconds=1), "error": None,
            "locked_until": None}
    with app.engine.begin() as conn:
        assert store.finish_many(conn, [(row["id"], 1, done) for row in claimed]) \
            == {row["id"] for row in claimed}
        update, params = next((s, p) for s, p in sent if s.startswith("UPDATE"))
        chosen = plan(conn, update, params)
        assert "cronjob_queue_pkey" in chosen and "ix_cronjob_queue" not in chosen, chosen
