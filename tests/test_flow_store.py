"""Pauses and blocks as stored rows: a pause replaces the previous one of its target and
ends by itself or on resume; a block is extended and never shortened, lifts by id or by
type and key, and expires; held counts say per queue and type (never per key) how many due
rows wait behind a pause, a block or a concurrency limit; bad targets are refused by name."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cronjobs import queue, store
from cronjobs.errors import InvalidJob
from cronjobs.flow.rules import Limits
from cronjobs.store.models import cronjob_queue as q

T0 = datetime(2026, 5, 5, 5, 5, 5)


def test_pause_resume_and_expiry(make_app):
    app = make_app()
    with app.engine.begin() as conn:
        store.pause(conn, "queue", "mail", now=T0, reason="incident 7", by="ops@host")
        store.pause(conn, "type", "a.execute", now=T0, until=T0 + timedelta(minutes=30),
                    by="ops@host")
        again = store.pause(conn, "queue", "mail", now=T0 + timedelta(seconds=5),
                            reason="still", by="ann@host")
        store.pause(conn, "task", "nightly", now=T0, by="ops@host")
    assert again["reason"] == "still"
    with app.engine.begin() as conn:
        live = store.list_pauses(conn, T0 + timedelta(minutes=10))
        assert [(p["scope"], p["name"]) for p in live] == [
            ("type", "a.execute"), ("task", "nightly"), ("queue", "mail")]
        assert live[2]["created_by"] == "ann@host" and live[2]["until"] is None
        assert store.is_task_paused(conn, "nightly", T0)
        assert not store.is_task_paused(conn, "other", T0)
        later = T0 + timedelta(minutes=31)
        assert [p["name"] for p in store.list_pauses(conn, later)] == ["nightly", "mail"]
        assert store.resume(conn, "task", "nightly") == 1
        assert store.resume(conn, "task", "nightly") == 0
        assert not store.is_task_paused(conn, "nightly", T0)
        assert store.prune_expired(conn, later) == {"pauses": 1, "blocks": 0, "starts": 0}


def test_block_extends_never_shortens_and_unblocks(make_app):
    app = make_app()
    with app.engine.begin() as conn:
        first = store.block(conn, "a.execute", "4711", now=T0, until=T0 + timedelta(seconds=30),
                            reason="FloodWait 30")
        shorter = store.block(conn, "a.execute", "4711", now=T0, until=T0 + timedelta(seconds=5),
                              reason="FloodWait 5")
        assert shorter["until"] == T0 + timedelta(seconds=30)
        assert shorter["reason"] == "FloodWait 30" and shorter["id"] == first["id"]
        longer = store.block(conn, "a.execute", "4711", now=T0, until=T0 + timedelta(seconds=90),
                             reason="FloodWait 90")
        assert (longer["until"], longer["reason"]) == (T0 + timedelta(seconds=90), "FloodWait 90")
        whole = store.block(conn, "a.execute", None, now=T0, until=T0 + timedelta(seconds=10))
        assert whole["limit_key"] is None
        assert [(b["limit_key"], b["until"]) for b in store.list_blocks(conn, T0)] == [
            (None, T0 + timedelta(seconds=10)), ("4711", T0 + timedelta(seconds=90))]
        assert [b["limit_key"] for b in store.list_blocks(conn, T0 + timedelta(seconds=10))] \
            == ["4711"]
        assert store.unblock(conn, job_type="a.execute") == 1
        assert store.unblock(conn, longer["id"]) == 1
        assert store.list_blocks(conn, T0) == []


def test_held_rows_per_queue_and_type(make_app):
    app = make_app()
    rows = [("mail", "a.execute", "k1"), ("mail", "a.execute", "k1"), ("mail", "b.execute", None),
            ("other", "a.execute", "k2"), ("other", "a.execute", "k3"), ("other", "c.execute", "x")]
    with app.engine.begin() as conn:
        for queue_name, job_type, key in rows:
            conn.execute(q.insert().values(type=job_type, queue=queue_name, limit_key=key,
                                           created_at=T0, updated_at=T0))
        conn.execute(q.insert().values(type="c.execute", queue="other", limit_key="x",
                                       status="running", created_at=T0, updated_at=T0))
        store.pause(conn, "queue", "mail", now=T0, by="ops")
        store.block(conn, "a.execute", "k2", now=T0, until=T0 + timedelta(seconds=60))
        held = store.held.held_rows(
            conn, T0, pauses=store.list_pauses(conn, T0), blocks=store.list_blocks(conn, T0),
            flow=store.FlowControl({"c.execute": Limits(concurrency=1)}))
    assert [{k: h[k] for k in ("queue", "type", "reason", "rows")} for h in held] == [
        {"queue": "mail", "type": "a.execute", "reason": "paused", "rows": 2},
        {"queue": "mail", "type": "b.execute", "reason": "paused", "rows": 1},
        {"queue": "other", "type": "a.execute", "reason": "blocked", "rows": 1},
        {"queue": "other", "type": "c.execute", "reason": "limited", "rows": 1},
    ]
    assert queue.get(1, ["status"], app=app) == {"status": "pending"}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_bad_targets_are_refused_by_name(make_app):
    app = make_app()
    with app.engine.begin() as conn:
        with pytest.raises(InvalidJob, match="pause scope must be one of queue, type, task, "
                                             "got 'host'"):
            store.pause(conn, "host", "x", now=T0, by="ops")
        with pytest.raises(InvalidJob, match="queue name 'a b'"):
            store.pause(conn, "queue", "a b", now=T0, by="ops")
        with pytest.raises(InvalidJob, match="a pause must end after now"):
            store.pause(conn, "queue", "mail", now=T0, until=T0, by="ops")
        with pytest.raises(InvalidJob, match="limit key is 200 characters"):
            store.block(conn, "a.execute", "k" * 200, now=T0, until=T0)
        with pytest.raises(ValueError, match="unblock takes a block id or a job type"):
            store.unblock(conn)
        assert store.list_pauses(conn, T0) == []
