"""A flood wait blocks a key, not one row: `RetryLater(delay, block="key")` puts its row back
without an attempt and holds every row of that type and key until then (other keys run),
written with the outcome, and lifted exactly when it ends; a row without a key blocks its
whole type; the block expires by itself; a bad `block` is refused."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cronjobs import queue, store
from cronjobs.clock import FrozenClock
from cronjobs.handler import CronJobHandler, RetryLater
from cronjobs.testing import drain

T0 = datetime(2026, 7, 7, 7, 0, 0)


class FloodExecute(CronJobHandler):
    """Raises a flood wait of `wait` seconds for rows whose payload says so, once per row
    (handlers run in the test's thread under `drain`)."""

    TYPE = "flow.flood.execute"
    LIMIT_KEY = "chat"
    waited: set[int] = set()

    def handle(self, payload, job):
        if payload.get("wait") and job.id not in self.waited:
            self.waited.add(job.id)
            raise RetryLater(payload["wait"], "FloodWait", block=payload.get("block", "key"))
        return True


def blocks(app, now):
    with app.engine.begin() as conn:
        return [(b["type"], b["limit_key"], b["until"], b["reason"])
                for b in store.list_blocks(conn, now)]


def states(app, ids):
    return [tuple(queue.get(i, ["status", "attempts"], app=app).values()) for i in ids]


def test_retry_later_blocks_the_key_and_other_keys_run(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    app.handlers.register(FloodExecute.TYPE, FloodExecute)
    FloodExecute.waited.clear()
    flood = queue.dispatch(FloodExecute.TYPE, {"chat": "A", "wait": 30}, priority=1)
    held = [queue.dispatch(FloodExecute.TYPE, {"chat": "A"}) for _ in range(3)]
    other = [queue.dispatch(FloodExecute.TYPE, {"chat": "B"}) for _ in range(3)]
    report = drain(app)
    assert [r.id for r in report.reports] == [flood, *other]
    assert blocks(app, T0) == [(FloodExecute.TYPE, "A", T0 + timedelta(seconds=30), "FloodWait")]
    assert states(app, [flood, *held]) == [("pending", 0)] * 4
    clock.advance(29.999)
    assert len(drain(app)) == 0
    clock.advance(0.001)  # the block and the first row's wait end together
    assert {r.id for r in drain(app).reports} == {flood, *held}
    assert states(app, [flood, *held]) == [("completed", 1)] * 4


@pytest.mark.parametrize("lift", ["by type and key", "by id"])
def test_lifting_a_block_early_releases_the_row_that_raised_it_too(make_app, lift):
    """The row that met the flood wait waits for its block, not for a time of its own: an
    operator who lifts the block sees that row run at once, not after the flood wait
    (before, it stayed pending until then while later rows of its key overtook it)."""
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    app.handlers.register(FloodExecute.TYPE, FloodExecute)
    FloodExecute.waited.clear()
    flood = queue.dispatch(FloodExecute.TYPE, {"chat": "Z", "wait": 300}, priority=1)
    later = queue.dispatch(FloodExecute.TYPE, {"chat": "Z"})
    assert [r.id for r in drain(app).reports] == [flood]
    assert states(app, [flood, later]) == [("pending", 0)] * 2
    clock.advance(5)
    assert len(drain(app)) == 0  # both held by the block
    with app.engine.begin() as conn:
        if lift == "by id":
            block_id = store.list_blocks(conn, clock.now())[0]["id"]
            assert store.unblock(conn, block_id) == 1
        else:
            assert store.unblock(conn, job_type=FloodExecute.TYPE, limit_key="Z") == 1
    assert [r.id for r in drain(app).reports] == [flood, later]
    assert states(app, [flood, later]) == [("completed", 1)] * 2


@pytest.mark.parametrize("lift", ["by id", "by type and key"])
def test_lifting_a_block_rings_the_queue_of_the_rows_it_held(make_app, lift):
    """The flooded row has no doorbell of its own (its block holds it): lifting the block
    rings its queue, so an idle worker claims it at once, not at the next sweep."""
    from cronjobs.actions import operator

    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    app.handlers.register(FloodExecute.TYPE, FloodExecute)
    FloodExecute.waited.clear()
    flood = queue.dispatch(FloodExecute.TYPE, {"chat": "Q", "wait": 600})
    assert [r.id for r in drain(app).reports] == [flood]
    rung = []
    app.broker.listen(lambda job_id, name, delay: rung.append((job_id, name)))
    with app.engine.begin() as conn:
        [block] = store.list_blocks(conn, clock.now())
    if lift == "by id":
        assert operator.unblock(app, block["id"]) is True
        assert operator.unblock(app, block["id"]) is False  # gone: nothing rung again
    else:
        assert operator.unblock(app, job_type=FloodExecute.TYPE, limit_key="Q") is True
    assert rung == [(flood, "default")]


def test_resuming_a_queue_rings_it_and_a_type_rings_its_rows_queues(make_app):
    from cronjobs.actions import operator

    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(FloodExecute.TYPE, FloodExecute)
    first = queue.dispatch(FloodExecute.TYPE, {"chat": "R"})
    other = queue.dispatch(FloodExecute.TYPE, {"chat": "R"}, queue="side")
    rung = []
    app.broker.listen(lambda job_id, name, delay: rung.append((job_id, name)))
    with app.engine.begin() as conn:
        store.pause(conn, "queue", "default", now=T0, by="test")
        store.pause(conn, "type", FloodExecute.TYPE, now=T0, by="test")
    assert operator.resume(app, "queue", "default") is True
    assert rung == [(first, "default")]
    assert operator.resume(app, "type", FloodExecute.TYPE) is True
    assert sorted(rung[1:]) == [(first, "default"), (other, "side")]
    assert operator.resume(app, "queue", "default") is False and len(rung) == 3


def test_a_row_without_a_key_blocks_its_type_and_type_blocks_expire(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    app.handlers.register(FloodExecute.TYPE, FloodExecute)
    FloodExecute.waited.clear()
    keyless = queue.dispatch(FloodExecute.TYPE, {"wait": 60}, priority=1)
    keyed = queue.dispatch(FloodExecute.TYPE, {"chat": "C"})
    assert [r.id for r in drain(app).reports] == [keyless]
    assert blocks(app, T0) == [(FloodExecute.TYPE, None, T0 + timedelta(seconds=60),
                                "FloodWait")]
    assert states(app, [keyed]) == [("pending", 0)]
    # its log line says what is blocked: the type (it has no key), not "the key"
    logged = queue.get(keyless, ["process_logs"], app=app)["process_logs"]
    assert "(blocks the type: the row has no limit key)" in logged
    assert "attempt 1/3 (not counted) on " in logged  # a RetryLater gives its attempt back
    clock.advance(60)
    assert {r.id for r in drain(app).reports} == {keyless, keyed}
    assert blocks(app, clock.now()) == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_bad_block_is_refused_by_name(make_app):
    with pytest.raises(ValueError, match="RetryLater block must be 'key', 'type' or None, "
                                         "got 'chat'"):
        RetryLater(30, block="chat")
    assert RetryLater(30, block="type").block == "type"
