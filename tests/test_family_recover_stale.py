"""Recover-stale finishes rows too: a killed worker's row without attempts left is
failed by `recover_stale`, and when it is the family's last row, that transaction
completes the family (its callbacks start) — the path `family.settle` names, run inline
on every backend."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from cronjobs import CronJobHandler, queue
from cronjobs.store.models import cronjob_family
from cronjobs.store.models import cronjob_queue as q
from cronjobs.testing import drain

SEEN: list[dict] = []


class Lone(CronJobHandler):
    TYPE = "famrs.lone.discover"
    ISOLATION = "thread"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        later = self.context.app.clock.now() + timedelta(hours=1)  # not run by drain()
        for n in range(payload["children"]):
            self.dispatch(LoneItem.TYPE, {"n": n}, scheduled_at=later)
        return True

    def on_complete(self, family, job):
        SEEN.append({"kind": "complete", "counts": family.counts})
        return True

    def on_failure(self, family, job):
        SEEN.append({"kind": "failure", "counts": family.counts})
        return True


class LoneItem(CronJobHandler):
    TYPE = "famrs.lone.execute"
    ISOLATION = "thread"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        return True


@pytest.fixture
def app(make_app):
    SEEN.clear()
    app = make_app()
    for cls in (Lone, LoneItem):
        app.handlers.register(cls.TYPE, cls)
    return app


def lost_run(app, ids: list[int]) -> None:
    """Rows `ids` as a killed worker leaves them: running, their only attempt used, the
    lease long gone."""
    with app.engine.begin() as conn:
        conn.execute(q.update().where(q.c.id.in_(ids)).values(
            status="running", attempts=1, max_attempts=1, worker_id="gone:1",
            started_at=app.clock.now(), locked_until=datetime(2000, 1, 1)))


@pytest.mark.parametrize("children", [1, 3])
def test_recover_stale_failing_the_last_rows_completes_the_family(app, children):
    root = queue.dispatch(Lone.TYPE, {"children": children}, app=app)
    drain(app)  # the root runs; its children are due in an hour
    with app.engine.connect() as conn:
        kids = [r[0] for r in conn.execute(sa.select(q.c.id).where(q.c.root_id == root))]
    assert len(kids) == children
    lost_run(app, kids)
    assert queue.recover_stale(0, app=app) == children
    drain(app)  # the callbacks, when the family completed
    with app.engine.connect() as conn:
        done = conn.execute(sa.select(cronjob_family.c.generation, cronjob_family.c.outcome)
                            .where(cronjob_family.c.root_id == root)).all()
        keys = sorted(r[0] for r in conn.execute(
            sa.select(q.c.idempotency_key).where(q.c.parent_id == root,
                                                 q.c.root_id.is_(None))))
    assert [tuple(d) for d in done] == [(1, "failure")]
    assert keys == [f"family:{root}:1:complete", f"family:{root}:1:failure"]
    assert SEEN == [{"kind": "complete", "counts": {"failed": children}},
                    {"kind": "failure", "counts": {"failed": children}}]


def test_recover_stale_giving_rows_back_does_not_complete_the_family(app):
    root = queue.dispatch(Lone.TYPE, {"children": 2}, app=app)
    drain(app)
    with app.engine.begin() as conn:
        kids = [r[0] for r in conn.execute(sa.select(q.c.id).where(q.c.root_id == root))]
        conn.execute(q.update().where(q.c.id.in_(kids)).values(
            status="running", attempts=1, max_attempts=3, worker_id="gone:1",
            started_at=app.clock.now(), locked_until=datetime(2000, 1, 1)))
    assert queue.recover_stale(0, app=app) == 2  # back to pending: the family goes on
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_family)).scalar() == 0
    drain(app)  # they are due now, run, and complete the family
    assert [s["kind"] for s in SEEN] == ["complete"]
    assert SEEN[0]["counts"] == {"completed": 2}


def test_an_operator_cancelling_the_last_pending_rows_completes_the_family(app):
    """`cronjobs cancel ID` (operator.cancel) and a bulk cancel finish pending rows:
    when they are the family's last, that transaction completes it (cancelled rows
    count as finished)."""
    from cronjobs.actions import bulk, operator
    from cronjobs.actions.selection import Selection

    root = queue.dispatch(Lone.TYPE, {"children": 3}, app=app)
    drain(app)  # the root runs; its children wait (due in an hour)
    with app.engine.connect() as conn:
        kids = [r[0] for r in conn.execute(sa.select(q.c.id).where(q.c.root_id == root)
                                           .order_by(q.c.id))]
    operator.cancel(app, kids[0], who="test")
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_family)).scalar() == 0
    started = bulk.start(app, "cancel", Selection(parent=root), who="test")
    bulk.run(app, started)
    drain(app)
    with app.engine.connect() as conn:
        done = conn.execute(sa.select(cronjob_family.c.outcome)
                            .where(cronjob_family.c.root_id == root)).scalars().all()
    assert done == ["failure"]
    assert SEEN[0] == {"kind": "complete", "counts": {"cancelled": 3}}
