"""Cleanup never deletes a live row through the parent cascade, nor part of a family that
is still going.

A finished parent is kept until its whole subtree is finished and past retention; no row
is deleted while it or any descendant is `pending` or `running`; no row of a family is
deleted while a row of that family (or one of its callback rows) is `pending` or
`running`, so the family's completion counts every row. On every backend.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.store.models import cronjob_queue as q

T0 = datetime(2026, 6, 1, 12, 0, 0)
OLD = T0 - timedelta(days=8)  # past the 7-day retention of completed rows


def set_row(app, job_id: int, **values) -> None:
    with app.engine.begin() as conn:
        conn.execute(q.update().where(q.c.id == job_id).values(**values))


def ids_left(app) -> set[int]:
    with app.engine.connect() as conn:
        return {r[0] for r in conn.execute(sa.select(q.c.id))}


def test_live_descendants_keep_their_finished_ancestors(make_app):
    app = make_app(clock=FrozenClock(T0))
    dispatch = lambda parent=None: queue.dispatch("test.shape.execute", {}, parent_id=parent)  # noqa: E731
    discover = dispatch()
    pending_child = dispatch(discover)    # scheduled for next month
    running_child = dispatch(discover)
    done_child = dispatch(discover)       # finished, past retention, but a parent itself
    grandchild = dispatch(done_child)     # pending
    lonely_old = dispatch()               # an unrelated old completed row
    set_row(app, discover, status="completed", finished_at=OLD)
    set_row(app, pending_child, scheduled_at=T0 + timedelta(days=30))
    set_row(app, running_child, status="running", attempts=1, started_at=T0)
    set_row(app, done_child, status="completed", finished_at=OLD)
    set_row(app, lonely_old, status="completed", finished_at=OLD)

    assert queue.cleanup() == {"completed": 1, "failed": 0, "cancelled": 0}
    assert ids_left(app) == {discover, pending_child, running_child, done_child, grandchild}

    # The grandchild finishes, past retention with its parent (done_child): both stay
    # while two rows of their family are live (the family's completion counts them).
    set_row(app, grandchild, status="failed", finished_at=T0 - timedelta(days=31))
    assert queue.cleanup() == {"completed": 0, "failed": 0, "cancelled": 0}
    assert ids_left(app) == {discover, pending_child, running_child, done_child, grandchild}

    # Both live children finish now: the family is over, and the subtree past retention
    # goes (the grandchild, then its parent); the two children are not past it yet.
    set_row(app, pending_child, status="completed", finished_at=T0)
    set_row(app, running_child, status="cancelled", finished_at=T0)
    assert queue.cleanup() == {"completed": 1, "failed": 1, "cancelled": 0}
    assert ids_left(app) == {discover, pending_child, running_child}

    # One child is past retention, the other is not: the parent still waits.
    set_row(app, pending_child, finished_at=OLD)
    assert queue.cleanup() == {"completed": 1, "failed": 0, "cancelled": 0}
    assert ids_left(app) == {discover, running_child}

    # The whole subtree is finished and past retention: the parent goes last.
    set_row(app, running_child, finished_at=OLD)
    assert queue.cleanup() == {"completed": 1, "failed": 0, "cancelled": 1}
    assert ids_left(app) == set()


def test_dry_run_counts_only_rows_that_would_go(make_app):
    app = make_app(clock=FrozenClock(T0))
    parent = queue.dispatch("test.shape.execute", {})
    child = queue.dispatch("test.shape.execute", {}, parent_id=parent)
    set_row(app, parent, status="completed", finished_at=OLD)
    assert queue.cleanup(dry_run=True)["completed"] == 0, "its child is pending"
    set_row(app, child, status="completed", finished_at=OLD)
    assert queue.cleanup(dry_run=True)["completed"] == 2, "the child, then the parent"
    assert ids_left(app) == {parent, child}
    assert queue.cleanup()["completed"] == 2, "what the dry run counted"


def test_dry_run_counts_what_the_cleanup_then_deletes_in_a_tree(make_app):
    """A dry run is the whole cleanup's count, also in trees: a finished subtree past its
    retention goes whole; a subtree with a row that stays (pending, or finished within
    its retention) keeps that row's ancestors, whatever their age."""
    app = make_app(clock=FrozenClock(T0))
    root = queue.dispatch("test.shape.execute", {})
    done = queue.dispatch("test.shape.execute", {}, parent_id=root)
    grandchild = queue.dispatch("test.shape.execute", {}, parent_id=done)
    kept_root = queue.dispatch("test.shape.execute", {})
    kept_mid = queue.dispatch("test.shape.execute", {}, parent_id=kept_root)
    young = queue.dispatch("test.shape.execute", {}, parent_id=kept_mid)
    sibling = queue.dispatch("test.shape.execute", {}, parent_id=kept_root)
    live_parent = queue.dispatch("test.shape.execute", {})
    queue.dispatch("test.shape.execute", {}, parent_id=live_parent)  # stays pending
    for job_id in (root, done, grandchild, kept_root, kept_mid, sibling, live_parent):
        set_row(app, job_id, status="completed", finished_at=OLD)
    set_row(app, young, status="failed", finished_at=T0)  # within its retention
    set_row(app, sibling, status="cancelled", finished_at=OLD)
    dry = queue.cleanup(dry_run=True)
    assert dry == {"completed": 3, "failed": 0, "cancelled": 1}, dry
    assert queue.cleanup() == dry
    assert not {root, done, grandchild, sibling} & ids_left(app)
    assert {kept_root, kept_mid, young, live_parent} <= ids_left(app)


def test_a_cancelled_run_with_children_is_kept(make_app):
    """A discover run that dispatched children and then returned `cancelled` keeps its row
    (a childless cancelled row is deleted at once; one with children never cascades)."""
    from cronjobs import CronJobHandler

    class FanOutThenCancelExecute(CronJobHandler):
        TYPE = "test.fanoutcancel.execute"

        def handle(self, payload, job):
            self.dispatch("test.shape.execute", {"shape": "true"})
            return {"success": True, "status": "cancelled", "result": {"reason": "in-sync"}}

    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(FanOutThenCancelExecute.TYPE, FanOutThenCancelExecute)
    parent = queue.dispatch(FanOutThenCancelExecute.TYPE, {})
    assert InlineRunner(Executor(app)).run_id(parent).status == "cancelled"
    with app.engine.connect() as conn:
        children = conn.execute(sa.select(q.c.id, q.c.status).where(q.c.parent_id == parent)).all()
    assert len(children) == 1 and children[0][1] == "pending"
    assert queue.get(parent)["status"] == "cancelled"
