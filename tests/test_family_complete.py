"""A family completes once per generation: zero children, children finishing before the
discover returns, grandchildren, a retry generation, MIN_SUCCESS_RATIO — with the
callback rows' contents (`family.counts`), run inline (`testing.drain`) on every backend."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
import sqlalchemy as sa

from cronjobs import CronJobHandler
from cronjobs.actions import operator
from cronjobs.job.executor import Executor
from cronjobs.store.models import cronjob_family, cronjob_queue
from cronjobs.testing import drain

pytestmark = pytest.mark.core

SEEN: list[dict] = []  # what the callbacks saw (inline runs: same process)
FIXED: set[str] = set()  # "items": the failing items succeed from now on


class Fan(CronJobHandler):
    TYPE = "fam.fan.discover"
    ISOLATION = "thread"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        for n in range(payload.get("children", 0)):
            self.dispatch("fam.fan.execute", {"n": n, "fail": n in payload.get("fail", []),
                                              "grand": payload.get("grand", 0)})
        return True

    def on_complete(self, family, job):
        SEEN.append({"kind": "complete", "root": family.root_id, "counts": family.counts,
                     "generation": family.generation, "job": job.id})
        return True

    def on_success(self, family, job):
        SEEN.append({"kind": "success", "root": family.root_id})
        return True

    def on_failure(self, family, job):
        SEEN.append({"kind": "failure", "root": family.root_id})
        return True


class FanItem(CronJobHandler):
    TYPE = "fam.fan.execute"
    ISOLATION = "thread"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        for n in range(payload.get("grand", 0)):
            self.dispatch("fam.fan.execute", {"n": n})
        if payload.get("fail") and "items" not in FIXED:
            raise RuntimeError(f"item {payload['n']} failed")
        return True


@pytest.fixture
def app(make_app):
    SEEN.clear()
    FIXED.clear()
    app = make_app()
    for cls in (Fan, FanItem):
        app.handlers.register(cls.TYPE, cls)
    return app


def dispatch_root(app, **payload) -> int:
    from cronjobs import queue
    return queue.dispatch(Fan.TYPE, payload, app=app)


def callback_rows(app, root: int) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(cronjob_queue.c.id, cronjob_queue.c.type, cronjob_queue.c.status,
                      cronjob_queue.c.idempotency_key, cronjob_queue.c.payload)
            .where(cronjob_queue.c.parent_id == root,
                   cronjob_queue.c.idempotency_key.like("family:%"))
            .order_by(cronjob_queue.c.id)).mappings()]


def completions(app, root: int) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(cronjob_family).where(cronjob_family.c.root_id == root)
            .order_by(cronjob_family.c.generation)).mappings()]


def test_zero_children_calls_back_right_after_the_discover(app):
    root = dispatch_root(app)
    drain(app)
    rows = callback_rows(app, root)
    assert [(r["type"], r["status"], r["idempotency_key"]) for r in rows] == [
        ("fam.fan.complete", "completed", f"family:{root}:1:complete"),
        ("fam.fan.success", "completed", f"family:{root}:1:success")]
    assert json.loads(rows[0]["payload"]) == {"family": root, "generation": 1}
    assert [s["kind"] for s in SEEN] == ["complete", "success"]
    assert SEEN[0]["counts"] == {} and SEEN[0]["generation"] == 1
    assert [(c["generation"], c["outcome"]) for c in completions(app, root)] == [(1, "success")]


def test_children_and_grandchildren_complete_once_with_counts(app):
    root = dispatch_root(app, children=5, fail=[1, 3], grand=2)
    drain(app)
    with app.engine.connect() as conn:
        counts = dict(conn.execute(sa.select(cronjob_queue.c.status, sa.func.count())
                                   .where(cronjob_queue.c.root_id == root)
                                   .group_by(cronjob_queue.c.status)).all())
    assert counts == {"completed": 13, "failed": 2}  # 5 children + 10 grandchildren
    assert [s["kind"] for s in SEEN] == ["complete", "failure"]
    assert SEEN[0]["counts"] == counts
    [done] = completions(app, root)
    assert done["outcome"] == "failure" and json.loads(done["counts"]) == counts
    assert len(callback_rows(app, root)) == 2


def test_min_success_ratio_decides_success_or_failure(app):
    class Lenient(Fan):
        TYPE = "fam.lenient.discover"
        MIN_SUCCESS_RATIO = 0.5

        def handle(self, payload, job):
            for n in range(4):
                self.dispatch("fam.fan.execute", {"n": n, "fail": n == 0})
            return True

    app.handlers.register(Lenient.TYPE, Lenient)
    from cronjobs import queue
    root = queue.dispatch(Lenient.TYPE, {}, app=app)
    drain(app)
    assert [s["kind"] for s in SEEN] == ["complete", "success"]
    assert [r["type"] for r in callback_rows(app, root)] == ["fam.lenient.complete",
                                                             "fam.lenient.success"]


def test_children_finishing_before_the_discover_returns_do_not_complete_it(app):
    """The children are run (inline) while the root is still running: no completion until
    the root's own outcome is written."""
    root = dispatch_root(app, children=3)
    executor = Executor(app, "test:1")
    with app.engine.begin() as conn:  # the root is claimed and left running
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == root)
                     .values(status="running", attempts=1))
    from cronjobs.handler import Job
    from cronjobs.job.context import JobContext
    from cronjobs.store.jobs import get_job
    with app.engine.connect() as conn:
        job = Job.from_row(get_job(conn, root))
    Fan(JobContext(app, job)).handle({"children": 3}, job)  # dispatches while running
    drain(app)  # the 3 children run and finish; the root is still running
    assert completions(app, root) == [] and SEEN == []
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == root)
                     .values(status="pending", attempts=0))
    drain(app)  # the root runs (dispatching 3 more) and its family completes
    assert [c["generation"] for c in completions(app, root)] == [1]
    assert SEEN[0]["counts"] == {"completed": 6}
    del executor


def test_retrying_failed_children_after_completion_starts_a_new_generation(app):
    root = dispatch_root(app, children=3, fail=[0])
    drain(app)
    assert [(c["generation"], c["outcome"]) for c in completions(app, root)] == [(1, "failure")]
    with app.engine.connect() as conn:
        failed = [r[0] for r in conn.execute(sa.select(cronjob_queue.c.id).where(
            cronjob_queue.c.root_id == root, cronjob_queue.c.status == "failed"))]
    FIXED.add("items")  # the failure is fixed
    operator.retry(app, failed[0], who="test")
    drain(app)
    assert [(c["generation"], c["outcome"]) for c in completions(app, root)] == [
        (1, "failure"), (2, "success")]
    keys = [r["idempotency_key"] for r in callback_rows(app, root)]
    assert keys == [f"family:{root}:1:complete", f"family:{root}:1:failure",
                    f"family:{root}:2:complete", f"family:{root}:2:success"]
    assert [s.get("generation") for s in SEEN if s["kind"] == "complete"] == [1, 2]


def test_cancelling_a_family_cancels_pending_rows_and_completes_it_cancelled(app):
    root = dispatch_root(app, children=4)
    from cronjobs.testing import drain as run
    run(app, limit=1)  # the discover: 4 children pending
    done = operator.cancel_family(app, root, who="test")
    assert done == {"root": root, "cancelled": 4, "stopping": 0}
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(cronjob_queue.c.status, cronjob_queue.c.outcome_reason,
                                      cronjob_queue.c.attempts)
                            .where(cronjob_queue.c.root_id == root)).all()
    assert {tuple(r) for r in rows} == {("cancelled", "cancelled.family", 0)}
    assert [(c["generation"], c["outcome"]) for c in completions(app, root)] == [
        (1, "cancelled")]
    run(app)
    assert [s["kind"] for s in SEEN] == ["complete", "failure"]
    assert SEEN[0]["counts"] == {"cancelled": 4}


def test_cancelling_the_last_pending_child_completes_the_family(app):
    root = dispatch_root(app, children=2)
    from cronjobs.testing import drain as run
    run(app, limit=2)  # the discover and one child
    with app.engine.connect() as conn:
        [last] = [r[0] for r in conn.execute(sa.select(cronjob_queue.c.id).where(
            cronjob_queue.c.root_id == root, cronjob_queue.c.status == "pending"))]
    operator.cancel(app, last, who="test")
    [done] = completions(app, root)
    assert done["outcome"] == "failure"  # one of two children completed: below 1.0
    assert json.loads(done["counts"]) == {"cancelled": 1, "completed": 1}


def test_recover_stale_failing_the_last_child_completes_the_family(app):
    from cronjobs import queue
    root = dispatch_root(app, children=1)
    from cronjobs.testing import drain as run
    run(app, limit=1)
    with app.engine.begin() as conn:  # the child was claimed by a worker that died
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.root_id == root).values(
            status="running", attempts=1, max_attempts=1, worker_id="gone:1",
            locked_until=datetime(2000, 1, 1)))
    assert queue.recover_stale(0, app=app) == 1
    [done] = completions(app, root)
    assert done["outcome"] == "failure" and json.loads(done["counts"]) == {"failed": 1}


def test_cleanup_with_zero_day_retention_keeps_a_family_until_its_callback_ran(app):
    from cronjobs import queue
    root = dispatch_root(app, children=3, fail=[2])
    from cronjobs.testing import drain as run
    run(app, limit=3)  # the discover and two children: one child still pending
    retention = {"completed": 0, "failed": 0, "cancelled": 0}
    queue.cleanup(retention, app=app)
    with app.engine.connect() as conn:
        left = conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue).where(
            (cronjob_queue.c.root_id == root) | (cronjob_queue.c.id == root))).scalar_one()
    assert left == 4  # nothing of a family still going
    with app.engine.begin() as conn:  # the last child ends; the callback waits (paused)
        from cronjobs import store
        store.flow.pause(conn, "type", "fam.fan.complete", now=app.clock.now(), by="test")
    run(app)
    queue.cleanup(retention, app=app)
    with app.engine.connect() as conn:
        left = conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue).where(
            (cronjob_queue.c.root_id == root) | (cronjob_queue.c.parent_id == root)
            | (cronjob_queue.c.id == root))).scalar_one()
    assert left == 6  # root, 3 children, 2 callback rows (one waiting behind its pause)
    with app.engine.begin() as conn:
        store.flow.resume(conn, "type", "fam.fan.complete")
    run(app)
    [seen] = [s for s in SEEN if s["kind"] == "complete"]
    assert seen["counts"] == {"completed": 2, "failed": 1}  # it counted every row
    for _ in range(4):  # children first, then the callbacks, then the root
        queue.cleanup(retention, app=app)
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue).where(
            cronjob_queue.c.id == root)).scalar_one() == 0


def test_the_api_cancels_a_family_with_the_bearer_token(make_app):
    from dashboard_helpers import TOKEN, web_client
    SEEN.clear()
    app = make_app(dashboard_token=TOKEN)
    for cls in (Fan, FanItem):
        app.handlers.register(cls.TYPE, cls)
    root = dispatch_root(app, children=2)
    from cronjobs.testing import drain as run
    run(app, limit=1)
    client = web_client(app)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert client.post(f"/api/jobs/{root}/family/cancel").status_code == 401
    assert client.post("/api/jobs/999999/family/cancel", headers=bearer).status_code == 404
    answer = client.post(f"/api/jobs/{root}/family/cancel", headers=bearer)
    assert answer.status_code == 200, answer.data
    assert answer.get_json() == {"root": root, "cancelled": 2, "stopping": 0}
    assert [(c["generation"], c["outcome"]) for c in completions(app, root)] == [
        (1, "cancelled")]


def test_rows_a_worker_still_runs_hold_the_family_even_when_written_one_by_one(app):
    """A worker leaves a family to the rows of it that it still runs (no witness read);
    a batch written row by row (the group commit's fallback) is not such a row: the last
    one written completes the family."""
    from cronjobs.job.outcome import from_return
    root = dispatch_root(app, children=2)
    from cronjobs.testing import drain as run
    run(app, limit=1)  # the discover: 2 children pending
    executor = Executor(app, "test:2")
    with app.engine.begin() as conn:
        claim = executor.claim_rows(conn, app.clock.now(), queue="default", limit=2)
    prepared = [executor.prepare(row, claim.terms[row["type"]]) for row in claim.rows]
    assert executor.held_families(set()) == {root}
    assert executor.held_families({prepared[0].job.id}) == {root}  # the other child
    plans = [executor.plan(p.job, from_return(True, FanItem()), 1.0) for p in prepared]
    written = executor.writer.write_each(plans)
    assert [final for _, final in written] == ["completed", "completed"]
    assert [(c["generation"], c["outcome"]) for c in completions(app, root)] == [
        (1, "success")]
