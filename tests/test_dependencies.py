"""`depends_on`: a row waits (`waiting`) until its dependencies finish; a failed or
cancelled one cancels it without an attempt (unless `allow_failed`); missing ids and
cycles are refused at dispatch; two dependencies finishing at once in two transactions
release the row exactly once; a dependency on a family root waits for the whole family.
On SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import json
import threading
from datetime import datetime

import pytest
import sqlalchemy as sa

from conftest import cli_env, run_cli
from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock
from cronjobs.errors import InvalidJob
from cronjobs.family import depends
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.store.db import run_in_transaction
from cronjobs.store.models import cronjob_queue
from cronjobs.testing import drain

T0 = datetime(2026, 3, 2, 9, 0, 5)


class Step(CronJobHandler):
    """Completes, or fails when the payload says so (no retry)."""

    TYPE = "dep.step.execute"
    QUEUE = "dep"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        if payload.get("fail"):
            raise RuntimeError("asked to fail")
        return True


class Fan(CronJobHandler):
    """A discover with `n` children (queue `depc`)."""

    TYPE = "dep.fan.discover"
    QUEUE = "depd"

    def handle(self, payload, job):
        for n in range(payload.get("n", 2)):
            self.dispatch("dep.step.execute", {"n": n}, queue="depc")
        return True


class SelfRoot(CronJobHandler):
    """A discover whose child depends on the family root (refused: a cycle)."""

    TYPE = "dep.selfroot.discover"
    QUEUE = "depd"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        self.dispatch("dep.step.execute", {}, depends_on=[job.id])
        return True


@pytest.fixture
def app(make_app):
    app = make_app(clock=FrozenClock(T0), handler_paths=())
    for cls in (Step, Fan, SelfRoot):
        app.handlers.register(cls.TYPE, cls)
    return app


def row(app, job_id: int) -> dict:
    return queue.get(job_id, app=app)


def test_a_row_waits_then_runs_once_its_dependencies_completed(app):
    a = queue.dispatch("dep.step.execute", {}, app=app)
    b = queue.dispatch("dep.step.execute", {}, app=app)
    c = queue.submit("dep.step.execute", {"c": 1}, depends_on=[a, b], app=app)
    assert c.status == "waiting"
    with app.engine.connect() as conn:
        assert depends.waiting_for(conn, [c.id]) == {c.id: [a, b]}
    runner = InlineRunner(Executor(app))
    assert runner.run_id(a).status == "completed"
    assert row(app, c.id)["status"] == "waiting"
    with app.engine.connect() as conn:
        assert depends.waiting_for(conn, [c.id]) == {c.id: [b]}
    assert runner.run_id(b).status == "completed"
    released = row(app, c.id)
    assert (released["status"], released["attempts"]) == ("pending", 0)
    assert "dependencies finished (" in released["process_logs"]
    drain(app, ["dep"])
    assert row(app, c.id)["status"] == "completed"


def test_a_failed_dependency_cancels_the_row_without_an_attempt(app):
    a = queue.dispatch("dep.step.execute", {"fail": True}, app=app)
    c = queue.dispatch("dep.step.execute", {}, depends_on=[a], app=app)
    d = queue.dispatch("dep.step.execute", {}, depends_on=[c], app=app)  # transitively
    drain(app, ["dep"])
    assert row(app, a)["status"] == "failed"
    for job_id in (c, d):
        got = row(app, job_id)
        assert (got["status"], got["attempts"], got["outcome_reason"]) == \
            ("cancelled", 0, "dependency_failed")
        assert got["finished_at"] == T0 and got["started_at"] is None
    assert row(app, c)["error"] == f"dependency {a} failed"
    assert row(app, d)["error"] == f"dependency {c} cancelled"


def test_allow_failed_runs_the_row_after_a_failed_dependency(app):
    a = queue.dispatch("dep.step.execute", {"fail": True}, app=app)
    c = queue.dispatch("dep.step.execute", {}, depends_on=[a], allow_failed=True, app=app)
    drain(app, ["dep"])
    assert (row(app, a)["status"], row(app, c)["status"]) == ("failed", "completed")


def test_an_operator_cancel_of_a_dependency_cancels_the_waiting_row(app):
    from cronjobs.actions import operator

    a = queue.dispatch("dep.step.execute", {}, app=app)
    c = queue.dispatch("dep.step.execute", {}, depends_on=[a], app=app)
    operator.cancel(app, a, who="test")
    assert (row(app, c)["status"], row(app, c)["error"]) == \
        ("cancelled", f"dependency {a} cancelled")


def test_dependencies_already_finished_decide_at_dispatch(app):
    ok = queue.dispatch("dep.step.execute", {}, app=app)
    bad = queue.dispatch("dep.step.execute", {"fail": True}, app=app)
    drain(app, ["dep"])
    assert queue.submit("dep.step.execute", {}, depends_on=[ok], app=app).status == "pending"
    refused = queue.submit("dep.step.execute", {}, depends_on=[ok, bad], app=app)
    got = row(app, refused.id)
    assert (got["status"], got["attempts"], got["error"]) == \
        ("cancelled", 0, f"dependency {bad} failed")


def test_missing_ids_are_refused_and_nothing_is_written(app):
    a = queue.dispatch("dep.step.execute", {}, app=app)
    with pytest.raises(InvalidJob, match=r"^depends_on: job\(s\) 999998, 999999 do not exist$"):
        queue.dispatch("dep.step.execute", {"x": 1}, depends_on=[999999, a, 999998], app=app)
    with pytest.raises(InvalidJob, match="depends_on must hold job ids"):
        queue.dispatch("dep.step.execute", {}, depends_on=["12"], app=app)
    with pytest.raises(InvalidJob, match="depends_on"):
        queue.dispatch_many([{"type": "dep.step.execute"},
                             {"type": "dep.step.execute", "depends_on": [999999]}], app=app)
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)).scalar() == 1


def test_a_row_depending_on_its_own_family_root_is_refused(app):
    root = queue.dispatch("dep.selfroot.discover", {}, app=app)
    drain(app, ["depd"])
    got = row(app, root)
    assert got["status"] == "failed"
    assert f"depends_on: job {root} waits for the new job's family root {root}" in got["error"]
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)
                            .where(cronjob_queue.c.parent_id == root)).scalar() == 0


def test_a_cycle_through_another_row_is_refused(app):
    root = queue.dispatch("dep.fan.discover", {"n": 0}, app=app)
    # a row of another family waits for the root: a child of the root may not wait for it
    other = queue.dispatch("dep.step.execute", {}, depends_on=[root], app=app)
    with pytest.raises(InvalidJob, match=rf"job {other} waits for the new job's family root "
                                         rf"{root} \(through job {other}\)"):
        queue.dispatch("dep.step.execute", {}, parent_id=root, depends_on=[other], app=app)


def test_dispatch_many_rows_with_dependencies(app):
    a = queue.dispatch("dep.step.execute", {}, app=app)
    ids = queue.dispatch_many([{"type": "dep.step.execute", "payload": {"n": 1}},
                               {"type": "dep.step.execute", "depends_on": [a]}], app=app)
    assert [row(app, i)["status"] for i in ids] == ["pending", "waiting"]
    drain(app, ["dep"])
    assert [row(app, i)["status"] for i in ids] == ["completed", "completed"]


def test_a_dependency_on_a_family_root_waits_for_the_whole_family(app):
    root = queue.dispatch("dep.fan.discover", {"n": 2}, app=app)
    after = queue.dispatch("dep.step.execute", {"after": "family"}, depends_on=[root], app=app)
    drain(app, ["depd"])  # the root completes; its 2 children wait in `depc`
    assert row(app, root)["status"] == "completed"
    assert row(app, after)["status"] == "waiting"  # not released by the root's own finish
    drain(app, ["depc"])  # the last child's finish completes the family: released
    assert row(app, after)["status"] == "pending"
    now = app.clock.now()
    again = run_in_transaction(app.engine, lambda c: depends.release_after_family(c, root, now))
    assert again == []  # released once


def test_a_failed_family_cancels_its_dependent(app):
    root = queue.dispatch("dep.fan.discover", {"n": 1}, app=app)
    after = queue.dispatch("dep.step.execute", {}, depends_on=[root], app=app)
    drain(app, ["depd"])
    now = app.clock.now()
    assert run_in_transaction(app.engine, lambda c: depends.release_after_family(
        c, root, now, outcome="failure")) == []
    got = row(app, after)
    assert (got["status"], got["attempts"], got["error"]) == \
        ("cancelled", 0, f"dependency {root} failed (its family)")


def test_the_cli_dispatches_with_depends_on_and_refuses_a_missing_id(app, db_url):
    a = queue.dispatch("dep.step.execute", {}, app=app)
    env = cli_env(db_url, CRONJOBS_REMOTE_TYPES="dep.*")
    out = run_cli(["dispatch", "dep.step.execute", "--depends-on", f"{a}", "--remote"], env)
    assert out.returncode == 0, out.stderr
    new = int(out.stdout.strip())
    assert row(app, new)["status"] == "waiting"
    got = run_cli(["get", str(new), "--columns", "id,status"], env)
    assert json.loads(got.stdout)["waiting_for"] == [a]
    bad = run_cli(["dispatch", "dep.step.execute", "--depends-on", "999999", "--remote"], env)
    assert bad.returncode == 2
    assert "depends_on: job(s) 999999 do not exist" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    lines = json.dumps({"type": "dep.step.execute", "depends_on": [a, new]}) + "\n"
    piped = run_cli_input(["dispatch", "--stdin", "--remote"], env, lines)
    assert piped.returncode == 0, piped.stderr
    assert row(app, int(piped.stdout.strip()))["status"] == "waiting"


def run_cli_input(args, env, text):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "cronjobs", *args], env=env, input=text,
                          capture_output=True, text=True, timeout=60)


def finish_racing(app, job_id: int, now, gate: threading.Barrier, results: dict) -> None:
    """Finish dependency `job_id` in a transaction of its own, then (after the other
    racer has written its own, neither committed) settle its dependents."""
    from cronjobs.status import Status

    with app.engine.connect() as conn, conn.begin():
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == job_id)
                     .values(status=Status.COMPLETED, finished_at=now))
        gate.wait(5)  # both dependencies written, neither committed
        results[job_id] = depends.after_finish(conn, [(job_id, Status.COMPLETED)], now)


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_two_dependencies_finishing_at_once_release_the_row_exactly_once(app):
    """Two transactions, each finishing one dependency, racing: the row locks serialise
    them and one of them (exactly one) releases the dependent."""
    for _ in range(10):
        a = queue.dispatch("dep.step.execute", {}, app=app)
        b = queue.dispatch("dep.step.execute", {}, app=app)
        c = queue.dispatch("dep.step.execute", {}, depends_on=[a, b], app=app)
        gate, results = threading.Barrier(2), {}
        threads = [threading.Thread(target=finish_racing,
                                    args=(app, i, app.clock.now(), gate, results))
                   for i in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(results) == [a, b]
        assert [r for s in results.values() for r in s.released] == [(c, "dep")]
        assert row(app, c)["status"] == "pending"


def test_the_sweep_releases_a_waiting_row_a_finish_did_not_decide(app):
    """The safety net: a row whose dependency finished without deciding it (here the
    dependency is marked finished by hand, as a missed decision would leave it)."""
    from cronjobs.worker.sweep import release_waiting

    a = queue.dispatch("dep.step.execute", {}, app=app)
    c = queue.dispatch("dep.step.execute", {}, depends_on=[a], app=app)
    with app.engine.begin() as conn:
        conn.execute(cronjob_queue.update().where(cronjob_queue.c.id == a)
                     .values(status="completed", finished_at=T0))
    assert row(app, c)["status"] == "waiting"
    assert release_waiting(app) == [(c, "dep")]
    assert row(app, c)["status"] == "pending"
    assert release_waiting(app) == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_queue_and_job_pages_say_what_a_row_waits_for(make_app):
    from dashboard_helpers import BEARER, TOKEN, web_client

    app = make_app(clock=FrozenClock(T0), handler_paths=(), dashboard_token=TOKEN)
    app.handlers.register(Step.TYPE, Step)
    a = queue.dispatch("dep.step.execute", {}, app=app)
    b = queue.dispatch("dep.step.execute", {}, app=app)
    c = queue.dispatch("dep.step.execute", {}, depends_on=[a, b], app=app)
    client = web_client(app)
    listing = client.get("/queue?status=waiting", headers=BEARER).get_data(as_text=True)
    assert f'<tr data-id="{c}" data-status="waiting">' in listing
    assert f"waiting for {a}, {b}" in listing
    job = client.get(f"/jobs/{c}", headers=BEARER).get_data(as_text=True)
    assert f'waiting for <a href="/jobs/{a}">#{a}</a>, <a href="/jobs/{b}">#{b}</a>' in job
    assert f'action="/jobs/{c}/cancel"' in job  # a waiting row can be cancelled
    InlineRunner(Executor(app)).run_id(a)
    job = client.get(f"/jobs/{c}", headers=BEARER).get_data(as_text=True)
    assert f'waiting for <a href="/jobs/{b}">#{b}</a></span>' in job
