"""Limits, blocks and pauses decided by the claim itself: CONCURRENCY per LIMIT_KEY takes at
most N running rows per key in priority then id order, a backlog of a held key never keeps
other rows of the queue from being claimed, RATE_LIMIT counts starts over an exact rolling
window, a queue's settings limit the queue as a whole, paused and blocked rows stay pending
with their attempts until the pause or block ends — and the limit key is computed at dispatch,
the queue limits read from the TOML file or the environment."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from cronjobs import queue, store
from cronjobs.clock import FrozenClock
from cronjobs.config import QueueSettings, Settings
from cronjobs.errors import ConfigError, HandlerError, InvalidJob, JobStateError
from cronjobs.handler import CronJobHandler
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner

pytestmark = pytest.mark.core  # the core subset (make test-core)

T0 = datetime(2026, 6, 6, 6, 0, 0)


class KeyedExecute(CronJobHandler):
    TYPE = "flow.keyed.execute"
    QUEUE = "flow"
    CONCURRENCY = 2
    LIMIT_KEY = "chat"

    def handle(self, payload, job):
        return True


class RatedExecute(CronJobHandler):
    TYPE = "flow.rated.execute"
    QUEUE = "flow"
    RATE_LIMIT = "3/s"

    def handle(self, payload, job):
        return True


class FreeExecute(CronJobHandler):
    TYPE = "flow.free.execute"
    QUEUE = "flow"

    def limit_key(self, payload):
        return payload.get("account")

    def handle(self, payload, job):
        return True


def flow_app(make_app, **settings):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, **settings)
    for cls in (KeyedExecute, RatedExecute, FreeExecute):
        app.handlers.register(cls.TYPE, cls)
    return app, clock


def claim(app, clock, limit=16, job_id=None):
    executor = Executor(app, "test:1")
    with app.engine.begin() as conn:
        kwargs = {"job_id": job_id} if job_id else {"queue": "flow", "limit": limit}
        return [r["id"] for r in executor.claim_rows(conn, clock.now(), **kwargs).rows]


def finish(app, ids):
    from cronjobs.store.models import cronjob_queue as q

    with app.engine.begin() as conn:
        conn.execute(q.update().where(q.c.id.in_(ids)).values(status="completed"))


def test_concurrency_per_key_in_priority_then_id_order(make_app):
    app, clock = flow_app(make_app)
    ids = {k: [queue.dispatch(KeyedExecute.TYPE, {"chat": k}) for _ in range(4)]
           for k in ("a", "b", "c")}
    low = queue.dispatch(KeyedExecute.TYPE, {"chat": "a"}, priority=1)
    assert queue.get(low, ["limit_key"], app=app) == {"limit_key": "a"}
    first = claim(app, clock)
    assert sorted(first) == sorted([low, ids["a"][0], *ids["b"][:2], *ids["c"][:2]])
    assert claim(app, clock) == []
    finish(app, [low])
    assert claim(app, clock) == [ids["a"][1]]
    assert {queue.get(i, ["attempts"], app=app)["attempts"] for i in ids["a"][2:]} == {0}


def test_a_held_backlog_does_not_block_the_queue(make_app):
    app, clock = flow_app(make_app)
    backlog = queue.dispatch_many([{"type": KeyedExecute.TYPE, "payload": {"chat": "hot"},
                                    "priority": 1} for _ in range(60)])
    others = [queue.dispatch(KeyedExecute.TYPE, {"chat": f"k{i}"}, priority=5)
              for i in range(5)]
    free = queue.dispatch(FreeExecute.TYPE, {"account": "x"}, priority=9)
    got = claim(app, clock, limit=8)
    assert got == [*backlog[:2], *others, free]
    with app.engine.begin() as conn:
        store.block(conn, FreeExecute.TYPE, None, now=T0, until=T0 + timedelta(seconds=30))
        store.pause(conn, "type", RatedExecute.TYPE, now=T0, by="test")
    blocked = queue.dispatch(FreeExecute.TYPE, {"account": "y"}, priority=0)
    paused = queue.dispatch(RatedExecute.TYPE, {}, priority=0)
    finish(app, got)
    assert claim(app, clock, limit=3) == backlog[2:4]
    assert queue.get(blocked, ["status", "attempts"], app=app) == {
        "status": "pending", "attempts": 0}
    clock.advance(30)
    finish(app, backlog[2:4])
    assert claim(app, clock, limit=1) == [blocked]
    with app.engine.begin() as conn:
        assert store.resume(conn, "type", RatedExecute.TYPE) == 1
    assert claim(app, clock, limit=1) == [paused]


def test_a_claim_that_meets_no_limited_row_locks_and_counts_nothing(make_app):
    """The limiters are locked and the running rows counted only once the candidates
    hold a row of a limited type: a queue of unlimited rows pays for no limit another
    handler of the worker has."""
    app, clock = flow_app(make_app)
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    free = queue.dispatch_many([{"type": FreeExecute.TYPE} for _ in range(3)])
    sa.event.listen(app.engine, "before_cursor_execute", record)
    try:
        assert claim(app, clock, limit=8) == free
        assert not [s for s in seen if "cronjob_limiter" in s or "GROUP BY" in s]
        keyed = queue.dispatch_many([{"type": KeyedExecute.TYPE, "payload": {"chat": "a"}}
                                     for _ in range(3)])
        seen.clear()
        assert claim(app, clock, limit=8) == keyed[:2]
        assert [s for s in seen if "GROUP BY" in s]  # the running rows were counted
        if app.engine.dialect.name != "sqlite":  # (one writer at a time: no limiter)
            assert [s for s in seen if "cronjob_limiter" in s]
    finally:
        sa.event.remove(app.engine, "before_cursor_execute", record)


def test_rate_limit_spaces_starts_within_an_exact_rolling_window(make_app):
    """3/s: one start at a time, 1/3 s (333,333 us) apart, and never a fourth in a
    rolling second; a refused claim tells when the next start is admitted."""
    app, clock = flow_app(make_app)
    ids = queue.dispatch_many([{"type": RatedExecute.TYPE} for _ in range(10)])
    executor = Executor(app, "test:1")
    with app.engine.begin() as conn:
        taken = executor.claim_rows(conn, clock.now(), queue="flow", limit=4)
    assert [row["id"] for row in taken.rows] == ids[:1]
    assert taken.held
    assert taken.retry_seconds == pytest.approx(0.333333)  # one spacing
    assert claim(app, clock) == []  # at the same instant: not two together
    clock.advance(0.333)
    with app.engine.begin() as conn:
        refused = executor.claim_rows(conn, clock.now(), queue="flow", limit=4)
    assert refused.rows == [] and refused.held
    assert refused.retry_seconds == pytest.approx(0.000333)
    clock.advance(0.000333)
    assert claim(app, clock) == ids[1:2]
    clock.advance(0.333333)
    assert claim(app, clock) == ids[2:3]
    clock.advance(0.333333)  # spaced enough, but the first started 0.999999 s ago
    assert claim(app, clock) == []
    clock.advance(0.000001)  # exactly one second: the first left the window
    assert claim(app, clock) == ids[3:4]


def test_queue_settings_limit_the_queue_as_a_whole(make_app):
    app, clock = flow_app(make_app, queues={"flow": {"concurrency": 3, "rate_limit": "4/m"}})
    ids = queue.dispatch_many([{"type": FreeExecute.TYPE} for _ in range(10)])
    assert claim(app, clock) == ids[:1]  # 4/m: one start every 15 s
    for n in (2, 3):
        clock.advance(15)
        assert claim(app, clock) == ids[n - 1:n]
    clock.advance(15)
    assert claim(app, clock) == []  # three running
    finish(app, ids[:3])
    assert claim(app, clock) == ids[3:4]  # the fourth start of the minute
    finish(app, ids[3:4])
    assert claim(app, clock) == []  # four in the last minute
    clock.advance(14.999)
    assert claim(app, clock) == []
    clock.advance(0.001)
    assert claim(app, clock) == ids[4:5]  # the first start left the window


def test_pauses_and_blocks_hold_a_claim_by_id(make_app):
    app, clock = flow_app(make_app)
    job = queue.dispatch(FreeExecute.TYPE, {"account": "acc-1"})
    with app.engine.begin() as conn:
        store.pause(conn, "queue", "flow", now=T0, until=T0 + timedelta(minutes=5), by="ops")
    assert claim(app, clock, job_id=job) == []
    with pytest.raises(JobStateError, match=f"job {job} is held by a pause, a block or a limit"):
        InlineRunner(Executor(app)).run_id(job)
    clock.advance(300)
    with app.engine.begin() as conn:
        store.block(conn, FreeExecute.TYPE, "acc-1", now=clock.now(),
                    until=clock.now() + timedelta(seconds=5), reason="FloodWait")
    with app.engine.begin() as conn:  # a claim of the queue: its rows wait for the block
        short = Executor(app).claim_rows(conn, clock.now(), queue="flow", limit=4)
    assert short.rows == [] and short.held
    assert short.retry_seconds == 5.0  # the worker claims again when the block ends
    assert claim(app, clock, job_id=job) == []
    clock.advance(5)
    assert claim(app, clock, job_id=job) == [job]
    with app.engine.begin() as conn:
        assert not Executor(app).claim_rows(conn, clock.now(), queue="flow", limit=4).held


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_bad_limits_are_refused_when_the_handler_loads(make_app):
    app, _ = flow_app(make_app)
    for attrs, message in (({"CONCURRENCY": 0}, "CONCURRENCY must be an integer >= 1"),
                           ({"RATE_LIMIT": "30/d"}, "RATE_LIMIT must look like '30/s'"),
                           ({"LIMIT_KEY": ""}, "LIMIT_KEY must be the name of a payload field"),
                           ({"LIMIT_KEY": "a", "limit_key": lambda self, p: "x"},
                            "set LIMIT_KEY")):
        bad = type("BadExecute", (KeyedExecute,), {"LIMIT_KEY": None, **attrs})
        with pytest.raises(HandlerError, match=message):
            app.handlers.register("flow.bad.execute", bad)
    with pytest.raises(InvalidJob, match="limit key is 200 characters"):
        queue.dispatch(KeyedExecute.TYPE, {"chat": "x" * 200})
    with pytest.raises(InvalidJob, match="limit key of KeyedExecute must be a string or a num"):
        queue.dispatch(KeyedExecute.TYPE, {"chat": ["x"]})
    assert queue.get(queue.dispatch(KeyedExecute.TYPE, {"chat": 4711}), ["limit_key"],
                     app=app) == {"limit_key": "4711"}
    # a limit_key() that raises is the dispatch's one-line error, nothing inserted
    raising = type("RaisingExecute", (FreeExecute,),
                   {"TYPE": "flow.raising.execute", "limit_key": lambda self, p: p["acct"]})
    app.handlers.register(raising.TYPE, raising)
    with pytest.raises(InvalidJob, match=r"limit_key\(payload\) raised KeyError: 'acct'"):
        queue.dispatch(raising.TYPE, {})
    with pytest.raises(InvalidJob, match="raised KeyError"):
        queue.dispatch_many([{"type": raising.TYPE, "payload": {"acct": 1}},
                             {"type": raising.TYPE, "payload": {}}])
    assert queue.get(queue.dispatch(raising.TYPE, {"acct": 7}), ["limit_key"],
                     app=app) == {"limit_key": "7"}


def test_queue_limits_from_the_toml_file_and_the_environment(tmp_path):
    toml = tmp_path / "cronjobs.toml"
    toml.write_text('[queues.broadcast]\nconcurrency = 1\nrate_limit = "30/s"\n')
    loaded = Settings.load({"CRONJOBS_CONFIG": str(toml)})
    assert loaded.queue_settings("broadcast") == QueueSettings(concurrency=1, rate_limit="30/s")
    assert loaded.queue_settings("other") == QueueSettings()
    env = Settings.load({"CRONJOBS_QUEUES": '{"mail": {"rate_limit": "5/m"}}'})
    assert env.queues == {"mail": QueueSettings(rate_limit="5/m")}
    for value, message in (('{"mail": {"rate_limit": "5/d"}}', "rate_limit must look like"),
                           ('{"mail": {"concurrency": 0}}', "concurrency must be an integer"),
                           ('{"a b": {}}', "queue name 'a b' may only contain"),
                           ('{"mail": {"limit": 1}}',
                            r"unknown key 'limit' \(did you mean rate_limit\?\)"),
                           ("nope", "must be a JSON object of queue tables")):
        with pytest.raises(ConfigError, match=message):
            Settings.load({"CRONJOBS_QUEUES": value})
