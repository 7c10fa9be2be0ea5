"""A job type that no handler of this process is registered for is refused at dispatch (API
and CLI alike, nothing inserted), unless the caller opts out for a type another codebase
runs (`known_type=False`, `--remote`, `CRONJOBS_REMOTE_TYPES`); a worker that lacks the
handler still puts such a row back and fails it after the grace."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
import sqlalchemy as sa

from conftest import cli_env, run_cli
from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock
from cronjobs.config import Settings
from cronjobs.errors import ConfigError, InvalidJob
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.store.models import cronjob_queue

T0 = datetime(2026, 6, 1, 12, 0, 0)


def count_rows(app) -> int:
    with app.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(cronjob_queue)).scalar_one()


def test_dispatch_and_submit_refuse_an_unknown_type_naming_it(make_app):
    app = make_app()
    for call in (queue.dispatch, queue.submit):
        with pytest.raises(InvalidJob) as caught:
            call("test.shape.exeucte", {"shape": "true"})
        message = str(caught.value)
        assert message.startswith("unknown job type 'test.shape.exeucte' (did you mean "
                                  "'test.shape.execute'?)"), message
        assert "\n" not in message and "known_type=False" in message
    with pytest.raises(InvalidJob, match=re.escape("unknown job type 'nosuch.type.execute': "
                                                   "no handler is registered")):
        queue.dispatch("nosuch.type.execute", {})
    assert count_rows(app) == 0


def test_dispatch_many_inserts_nothing_when_one_type_is_unknown(make_app):
    app = make_app()
    jobs = [{"type": "test.shape.execute", "payload": {"n": n}} for n in range(5)]
    with pytest.raises(InvalidJob, match="unknown job type 'nosuch.type.execute'"):
        queue.dispatch_many([*jobs, {"type": "nosuch.type.execute"}])
    with pytest.raises(InvalidJob, match="unknown job type 'nosuch.type.execute'"):
        queue.dispatch_many([{"type": "nosuch.type.execute", "idempotency_key": "k"}, *jobs])
    assert count_rows(app) == 0


def test_a_handler_cannot_dispatch_a_child_of_an_unknown_type(make_app):
    class FanOutExecute(CronJobHandler):
        TYPE = "test.fanout.execute"
        MAX_ATTEMPTS = 1

        def handle(self, payload, job):
            self.dispatch(payload["child"], {})
            return True

    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(FanOutExecute.TYPE, FanOutExecute)
    bad = queue.dispatch(FanOutExecute.TYPE, {"child": "nosuch.child.execute"})
    good = queue.dispatch(FanOutExecute.TYPE, {"child": "test.shape.execute"})
    runner = InlineRunner(Executor(app))
    assert runner.run_id(bad).status == "failed"
    assert "unknown job type 'nosuch.child.execute'" in queue.get(bad)["error"]
    assert runner.run_id(good).status == "completed"
    assert count_rows(app) == 3  # the two parents and the one known child


def test_known_type_false_inserts_a_row_for_another_codebase(make_app):
    app = make_app()
    first = queue.dispatch("billing.invoice.execute", {"n": 1}, known_type=False,
                           queue="billing")
    second = queue.submit("billing.invoice.execute", {"n": 2}, known_type=False)
    many = queue.dispatch_many([{"type": "billing.invoice.execute", "known_type": False},
                                {"type": "test.shape.execute"}])
    assert second.created and len(many) == 2
    rows = [queue.get(i, ["type", "queue", "status", "max_attempts"])
            for i in (first, second.id, many[0])]
    assert rows[0] == {"type": "billing.invoice.execute", "queue": "billing",
                       "status": "pending", "max_attempts": None}  # its worker decides
    assert rows[1]["queue"] == rows[2]["queue"] == "default"
    assert count_rows(app) == 4


def test_the_remote_types_setting_accepts_matching_types_only(make_app):
    app = make_app(remote_types=("billing.*", "*.export.execute"))
    ids = [queue.dispatch("billing.invoice.execute", {}),
           queue.submit("crm.export.execute", {}).id,
           *queue.dispatch_many([{"type": "billing.refund.execute"}])]
    assert [queue.get(i, ["status"])["status"] for i in ids] == ["pending"] * 3
    with pytest.raises(InvalidJob, match="unknown job type 'Billing.invoice.execute'"):
        queue.dispatch("Billing.invoice.execute", {})  # patterns are case sensitive
    with pytest.raises(InvalidJob, match="unknown job type 'crm.export.discover'"):
        queue.dispatch("crm.export.discover", {})
    assert count_rows(app) == 3


def test_remote_types_come_comma_separated_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = Settings.load(environ={"CRONJOBS_REMOTE_TYPES": "billing.*, crm.export.execute"})
    assert settings.remote_types == ("billing.*", "crm.export.execute")
    with pytest.raises(ConfigError, match="CRONJOBS_REMOTE_TYPE.*did you mean"):
        Settings.load(environ={"CRONJOBS_REMOTE_TYPE": "billing.*"})


def test_the_cli_refuses_an_unknown_type_and_accepts_it_with_remote(make_app, db_url, namespace):
    app = make_app()
    env = cli_env(db_url, namespace)
    refused = run_cli(["dispatch", "test.shape.exeucte", "--payload", '{"a": 1}'], env)
    assert refused.returncode == 2 and refused.stdout == ""
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("error: unknown job type 'test.shape.exeucte' (did you mean "
                               "'test.shape.execute'?)"), lines[0]
    assert count_rows(app) == 0
    accepted = run_cli(["dispatch", "billing.invoice.execute", "--remote"], env)
    assert accepted.returncode == 0, accepted.stderr
    row = queue.get(int(accepted.stdout), ["type", "status"])
    assert row == {"type": "billing.invoice.execute", "status": "pending"}
    by_setting = run_cli(["dispatch", "billing.refund.execute"],
                         {**env, "CRONJOBS_REMOTE_TYPES": "billing.*"})
    assert by_setting.returncode == 0, by_setting.stderr
    assert count_rows(app) == 2


@pytest.mark.parametrize("bad", ["other thing", "x\ny", "<script>alert(1)</script>",
                                 "billing", "billing.invoice", "billing.invoice.run",
                                 "a.b\n.execute", "a.<b>.execute", ".execute", "a..execute",
                                 " a.b.execute", "a/b.execute", "x.\u202e.execute",
                                 "a.b.execute "])
def test_a_remote_type_must_have_a_handlers_shape(make_app, db_url, namespace, bad):
    """A type another codebase runs is still a handler's TYPE (dotted, ending in
    .discover or .execute): any other name makes a row no worker could ever run."""
    app = make_app(remote_types=("billing*", "*thing", "x*", "<*", "a*", ".*", " *"))
    message = (f"job type {bad!r} must be dotted names of letters, digits, _ and - ending "
               f"in .discover or .execute")
    for call in (lambda: queue.dispatch(bad, {}, known_type=False),
                 lambda: queue.dispatch(bad, {}),  # matched by a remote_types pattern
                 lambda: queue.dispatch_many([{"type": bad, "known_type": False}])):
        with pytest.raises(InvalidJob, match=re.escape(message)):
            call()
    refused = run_cli(["dispatch", bad, "--remote"], cli_env(db_url, namespace))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [f"error: {message}, as a handler's TYPE"]
    assert count_rows(app) == 0


def test_a_worker_that_lacks_the_handler_puts_the_row_back_then_fails_it(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock, unknown_type_grace_seconds=60,
                   remote_types=("billing.*",))
    job_id = queue.dispatch("billing.invoice.execute", {}, max_attempts=2)
    runner = InlineRunner(Executor(app))
    assert runner.run_next("default").status == "pending"
    row = queue.get(job_id)
    assert row["attempts"] == 0 and "waiting since" in row["error"]
    while row["status"] == "pending":
        clock.set(row["scheduled_at"])
        runner.run_next("default")
        row = queue.get(job_id)
    assert row["status"] == "failed"
    assert row["error"].startswith("no handler registered for type 'billing.invoice.execute'")
    assert (clock.now() - T0).total_seconds() == 60
