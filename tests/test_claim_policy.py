"""One claim for every path, with a policy hook: a policy's condition keeps rows out of the
claim without blocking the rows behind them, its filter leaves the rows it drops pending
with their attempts, and without a policy (or with the default flow policy and no limit
configured: only the probe of the pause and block tables, and their conditions while one
is stored) a claim is one locking SELECT plus one UPDATE per terms group — the statements
the worker, `drain()`, `run_next` and `process` all run."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.flow.rules import Limits
from cronjobs.job.executor import Executor
from cronjobs.store import FlowControl
from cronjobs.store.claim import select_sql, update_sql
from cronjobs.store.flow import HOLDS_STORED_SQL, claim_hold_sql, pause, resume
from cronjobs.store.sql import name
from cronjobs.testing import drain
from cronjobs.worker.loop import WorkerProcess
from test_worker_e2e import REDIS, wait_for

pytestmark = pytest.mark.core  # the core subset (make test-core)

T0 = datetime(2026, 4, 4, 4, 4, 4)
SHAPE, SLOW = "test.shape.execute", "test.slow.execute"  # MAX_RUNTIME 120 s and 8 s
ONCE_HANDLERS = str(Path(__file__).parent / "attempt_handlers")


@contextmanager
def statements(app, table="cronjob_queue"):
    """The statements on `table` that `app`'s engine sends while the block runs."""
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if table in statement:
            seen.append(statement)

    sa.event.listen(app.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(app.engine, "before_cursor_execute", record)


def dialect(app) -> str:
    with app.engine.connect() as conn:
        return name(conn)


def rows_of(app, ids) -> dict[int, tuple]:
    """Row id -> (status, attempts)."""
    return {i: tuple(queue.get(i, ["status", "attempts"], app=app).values()) for i in ids}


def candidate_selects(seen: list[str]) -> list[str]:
    return [s for s in seen if " ORDER BY priority, id LIMIT " in s]


def test_a_held_type_is_excluded_without_blocking_the_rows_behind(make_app):
    app = make_app(clock=FrozenClock(T0))
    held = [queue.dispatch(SLOW, {}, priority=1) for _ in range(5)]
    others = [queue.dispatch(SHAPE, {"shape": "true"}, priority=5) for _ in range(3)]
    with app.engine.begin() as conn:
        pause(conn, "type", SLOW, now=T0, by="test")
    executor = Executor(app, "w:1")
    with app.engine.begin() as conn:
        rows = executor.claim_rows(conn, T0, queue="default", limit=2).rows
    assert [r["id"] for r in rows] == others[:2]
    assert rows_of(app, held) == {i: ("pending", 0) for i in held}
    with app.engine.begin() as conn:  # by id too: flow control decides
        assert executor.claim_rows(conn, T0, job_id=held[0]).rows == []


def test_rows_a_limit_refuses_stay_pending_and_the_claim_selects_again(make_app):
    app = make_app(clock=FrozenClock(T0))
    a = [queue.dispatch(SLOW, {}, priority=1) for _ in range(3)]
    b = [queue.dispatch(SHAPE, {"shape": "true"}, priority=2) for _ in range(2)]
    c = queue.dispatch("test.record.execute", {}, priority=3)
    one_each = FlowControl({t: Limits(concurrency=1)
                            for t in (SLOW, SHAPE, "test.record.execute")})
    with statements(app) as seen, app.engine.begin() as conn:
        rows = Executor(app, "w:1", flow=one_each).claim_rows(conn, T0, queue="default",
                                                              limit=5).rows
    assert [r["id"] for r in rows] == [a[0], b[0], c]
    assert all(r["status"] == "running" and r["attempts"] == 1 for r in rows)
    # The first SELECT's candidates: one of each type taken; the second excludes the
    # full types and finds nothing more.
    assert len(candidate_selects(seen)) == 2
    dropped = [*a[1:], b[1]]
    assert rows_of(app, dropped) == {i: ("pending", 0) for i in dropped}


@pytest.mark.parametrize("flow", [True, None], ids=["flow-policy", "base-policy"])
def test_a_claim_is_one_select_and_one_update_per_terms_group(make_app, flow):
    app = make_app(clock=FrozenClock(T0))
    same = [queue.dispatch(SHAPE, {"shape": "true"}) for _ in range(4)]
    executor = Executor(app, "w:1", flow=flow)
    d = dialect(app)
    # The flow policy, nothing paused or blocked: no statement of its own; its SELECT
    # returns the probe (whether a pause or block is stored) and no hold condition.
    select = select_sql(d, by_id=False, probe=HOLDS_STORED_SQL if flow else "")
    with statements(app) as seen, app.engine.begin() as conn:
        executor.claim_rows(conn, T0, queue="default", limit=8)
    assert seen == [select, update_sql(d, same)]
    mixed = [queue.dispatch(SHAPE, {"shape": "true"}), queue.dispatch(SLOW, {}),
             queue.dispatch(SHAPE, {"shape": "true"})]
    with statements(app) as seen, app.engine.begin() as conn:
        executor.claim_rows(conn, T0, queue="default", limit=8)
    assert seen == [select, update_sql(d, [mixed[0], mixed[2]]),
                    update_sql(d, [mixed[1]])]  # two leases: 120 s and 8 s, plus grace


def test_drain_run_next_and_process_run_the_same_claim(make_app):
    app = make_app(clock=FrozenClock(T0))
    d = dialect(app)
    ids = [queue.dispatch(SHAPE, {"shape": "true"}) for _ in range(3)]
    with statements(app) as seen:
        assert len(drain(app, ["default"])) == 3
    # Besides its claims, drain reads only the rows past their deadline (to end them
    # `expired`, as the sweep does) and the counts of what it left waiting.
    claims = {s for s in seen if s.startswith("SELECT") and not s.startswith("SELECT count(*)")
              and "expires_at <=" not in s}
    assert claims == {select_sql(d, by_id=False, probe=HOLDS_STORED_SQL)}
    assert len([s for s in seen if s.startswith("SELECT count(*)")]) == 2
    assert [s for s in seen if s.startswith("UPDATE cronjob_queue SET status = 'running'")] \
        == [update_sql(d, [i]) for i in ids]
    one = queue.dispatch(SHAPE, {"shape": "true"})
    with statements(app) as seen:
        assert queue.process(one) is True
    assert seen[:2] == [select_sql(d, by_id=True, probe=HOLDS_STORED_SQL),
                        update_sql(d, [one])]
    # With a pause stored (another queue), the probe finds it: the row is selected again
    # with the hold condition, whose per-row part lets this row through.
    paused_elsewhere = queue.dispatch(SHAPE, {"shape": "true"})
    with app.engine.begin() as conn:
        pause(conn, "queue", "elsewhere", now=T0, by="test")
    with statements(app) as seen:
        assert queue.process(paused_elsewhere) is True
    assert seen[:3] == [select_sql(d, by_id=True, probe=HOLDS_STORED_SQL),
                        select_sql(d, by_id=True, extra=claim_hold_sql(d),
                                   probe=HOLDS_STORED_SQL),
                        update_sql(d, [paused_elsewhere])]


def claimed(executor, app, limit):
    with app.engine.begin() as conn:
        return [r["id"] for r in executor.claim_rows(conn, T0, queue="default", limit=limit).rows]


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_a_pause_made_between_two_claims_holds_from_the_next_one(make_app):
    """The flow policy leaves the hold condition out of its SELECT while its last probe
    found no pause or block stored. A pause made by another process since is found by the
    next claim's probe: that claim takes none of the rows its SELECT locked and selects
    again with the condition, in the same transaction (the paused type's rows stay
    pending, the rows behind them are taken); the policy's claims carry the condition
    until a probe finds the flow tables empty again."""
    app = make_app(clock=FrozenClock(T0))
    d = dialect(app)
    executor = Executor(app, "w:1")  # the flow policy, kept from claim to claim (a worker)
    lean = select_sql(d, by_id=False, probe=HOLDS_STORED_SQL)
    held = select_sql(d, by_id=False, extra=claim_hold_sql(d), probe=HOLDS_STORED_SQL)
    first = queue.dispatch(SHAPE, {"shape": "true"})
    with statements(app) as seen:
        assert claimed(executor, app, 8) == [first]
    assert seen == [lean, update_sql(d, [first])]

    slow = [queue.dispatch(SLOW, {}, priority=1) for _ in range(3)]
    shape = [queue.dispatch(SHAPE, {"shape": "true"}, priority=5) for _ in range(2)]
    with app.engine.begin() as conn:
        pause(conn, "type", SLOW, now=T0, by="another process")
    with statements(app) as seen, app.engine.begin() as conn:
        claim = executor.claim_rows(conn, T0, queue="default", limit=8)
    assert claim.held  # the pause is live
    assert [r["id"] for r in claim.rows] == shape
    assert seen == [lean, held, update_sql(d, shape)]
    assert rows_of(app, slow) == {i: ("pending", 0) for i in slow}
    with statements(app) as seen:
        assert claimed(executor, app, 8) == []
    assert seen == [held]

    with app.engine.begin() as conn:
        assert resume(conn, "type", SLOW) == 1
    with statements(app) as seen:
        assert claimed(executor, app, 2) == slow[:2]
    assert seen == [held, update_sql(d, slow[:2])]  # its probe finds the tables empty
    with statements(app) as seen, statements(app, "cronjob_pause") as flow_reads, \
            app.engine.begin() as conn:
        claim = executor.claim_rows(conn, T0, queue="default", limit=8)
    # A short claim whose probe found nothing stored reads no flow table to know that no
    # row waits behind a pause or block.
    assert not claim.held
    assert [r["id"] for r in claim.rows] == slow[2:]
    assert seen == [lean, update_sql(d, slow[2:])]
    assert [s for s in flow_reads if s != lean] == []


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_the_worker_claims_with_the_same_sql_and_its_handlers_attempts(make_app):
    """A real worker (job processes, group commit) runs the claim above, and a row
    dispatched by a process without the handler gets the worker's MAX_ATTEMPTS (1)."""
    web = make_app(broker_url=REDIS, handler_paths=())
    app = make_app(broker_url=REDIS, handler_paths=(ONCE_HANDLERS,))
    job_id = queue.dispatch("test.once.execute", {"fail": True}, known_type=False, app=web)
    worker = WorkerProcess(app, ["default"], 2)
    with statements(app) as seen:
        worker.start()
        try:
            wait_for(lambda: queue.get(job_id, ["status"], app=app)["status"] == "failed", 60,
                     "the row to fail")
        finally:
            worker.shutdown(10)
    row = queue.get(job_id, app=app)
    assert (row["status"], row["attempts"], row["max_attempts"]) == ("failed", 1, 1)
    claims = {s for s in seen if " ORDER BY priority, id LIMIT " in s}
    assert claims == {select_sql(dialect(app), by_id=False, probe=HOLDS_STORED_SQL)}
