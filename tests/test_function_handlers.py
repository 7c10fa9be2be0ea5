"""Functions as handlers (`@cronjobs.handler`): a module of decorated functions in a
handler folder, under any file name, registers one class per function in the same
registry as the class form; `list-handlers` names them `file:function`; a decorated
function runs on a schedule (a tick with an injected clock, then a real `cronjobs worker
--burst` whose job processes load the folder), with its MAX_RUNTIME enforced, and shows on
the task list, `cronjobs tasks`, the task page and the Results tab; bad keywords and two
functions of one type are clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import datetime

import pytest
import sqlalchemy as sa

import cronjobs
from conftest import cli_env, run_cli
from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock
from cronjobs.config import Settings
from cronjobs.errors import DuplicateHandlerType, HandlerError
from cronjobs.handler import callback_kinds
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue
from dashboard_helpers import TOKEN, login, web_client
from registry import HandlerRegistry, class_name

T0 = datetime(2026, 3, 2, 9, 0, 5)
SERVER = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)

# Any file name: two handlers, a function that dispatches children and a slow one.
JOBS = '''
import time

import cronjobs


@cronjobs.handler("fh.report.execute", frequency="minute", max_attempts=2, max_runtime=30,
                  overlap="allow", example_payload={"region": "eu"},
                  render_summary=lambda result: f"REPORT OF {result['rows']} ROWS")
def daily(payload, job):
    """The daily report."""
    return {"success": True, "result": {"rows": 3, "slot": payload.get("slot")}}


@cronjobs.handler("fh.fan.execute", queue="default")
def fan(payload, job, handler):
    for n in range(2):
        handler.dispatch("fh.leaf.execute", {"n": n})
    return True


@cronjobs.handler("fh.leaf.execute")
def leaf(payload, job):
    return True


@cronjobs.handler("fh.slow.execute", max_runtime=1, max_attempts=1)
def slow(payload, job):
    time.sleep(30)
    return True
'''


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "handlers"
    path.mkdir()
    (path / "my_little_jobs.py").write_text(JOBS, encoding="utf-8")
    return path


def _registry(folder) -> HandlerRegistry:
    registry = HandlerRegistry(Settings(handler_paths=(str(folder),)))
    registry.load()
    return registry


def test_decorated_functions_of_a_folder_file_are_registered_and_stay_plain_functions(folder):
    registry = _registry(folder)
    cls = registry.resolve_handler("fh.report.execute")
    assert issubclass(cls, CronJobHandler) and class_name(cls) == "daily"
    assert (cls.FREQUENCY, cls.MAX_ATTEMPTS, cls.MAX_RUNTIME, cls.OVERLAP) == ("minute", 2, 30,
                                                                              "allow")
    assert cls.EXAMPLE_PAYLOAD == {"region": "eu"} and cls.__doc__ == "The daily report."
    assert cls.render_summary({"rows": 7}) == "REPORT OF 7 ROWS"
    source = registry.handler_source("fh.report.execute")
    assert source == f"{folder / 'my_little_jobs.py'}:daily"
    assert registry.handler_source("fh.slow.execute").endswith("my_little_jobs.py:slow")
    assert {"fh-report", "fh-fan", "fh-leaf", "fh-slow"} <= set(registry.tasks())
    assert registry.resolve_task_type("fh-report") == "fh.report.execute"

    @cronjobs.handler("fh.plain.execute", max_runtime=5)
    def plain(payload, job):
        return {"success": True, "result": payload}

    assert plain({"a": 1}, None) == {"success": True, "result": {"a": 1}}
    assert plain.handler_class.TYPE == "fh.plain.execute"
    assert plain.handler_class().handle({"b": 2}, None) == {"success": True, "result": {"b": 2}}
    registry.register("fh.plain.execute", plain.handler_class)
    assert registry.resolve_handler("fh.plain.execute") is plain.handler_class

    @cronjobs.handler("fh.hooks.discover", available=lambda: False, idle=lambda app: "none",
                      limit_key=lambda payload: payload["k"], on_failure=lambda f, j: True)
    def hooks(payload, job):
        return True

    hooked = hooks.handler_class
    assert (hooked.available(), hooked.idle(None), hooked().limit_key({"k": "a"})) == (
        False, "none", "a")
    assert callback_kinds(hooked) == ("failure",)
    registry.register(hooked.TYPE, hooked)  # the registry's checks of the class pass


def test_an_entry_point_may_name_a_decorated_function(tmp_path, monkeypatch):
    (tmp_path / "fh_plugin_mod.py").write_text(textwrap.dedent('''
        import cronjobs

        @cronjobs.handler("fh.plugin.execute", max_attempts=5)
        def daily(payload, job):
            return True
    '''), encoding="utf-8")
    info = tmp_path / "fh_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fh-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[cronjobs.handlers]\nfhdaily = fh_plugin_mod:daily\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = HandlerRegistry(Settings(handler_paths=()))
    registry.load()
    assert registry.resolve_handler("fh.plugin.execute").MAX_ATTEMPTS == 5
    assert registry.handler_source("fh.plugin.execute") == \
        "entry point fhdaily (fh_plugin_mod:daily)"


def test_cronjobs_handler_is_the_decorator_in_a_fresh_process():
    """`import cronjobs` alone: the attribute and `from cronjobs import handler` both give
    the decorator, and the contract's names still import from `cronjobs.handler`, also
    after the decorator was used."""
    code = ("import cronjobs\n"
            "@cronjobs.handler('fh.fresh.execute', max_runtime=7)\n"
            "def fresh(payload, job):\n    return True\n"
            "from cronjobs import handler\n"
            "from cronjobs.handler import CronJobHandler\n"
            "assert handler is cronjobs.handler\n"
            "assert issubclass(fresh.handler_class, CronJobHandler)\n"
            "print(fresh.handler_class.MAX_RUNTIME, fresh({}, None))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "7 True\n"), done.stderr[-2000:]


def test_bad_keywords_values_and_duplicates_are_clear_errors(tmp_path):
    with pytest.raises(TypeError, match=r"unknown keyword 'max_runtme' \(did you mean "
                                         r"'max_runtime'\?\); allowed: .*max_runtime"):
        cronjobs.handler("fh.x.execute", max_runtme=5)
    with pytest.raises(TypeError, match=r"unknown keyword 'TYPE'"):
        cronjobs.handler("fh.x.execute", TYPE="fh.y.execute")
    with pytest.raises(TypeError, match=r"job type as its first argument .* got 5"):
        cronjobs.handler(5)
    with pytest.raises(TypeError, match=r"'idle' must be a callable, got 'no'"):
        cronjobs.handler("fh.x.execute", idle="no")
    with pytest.raises(TypeError, match=r"decorates a function"):
        cronjobs.handler("fh.x.execute")(CronJobHandler)

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "jobs.py").write_text(textwrap.dedent('''
        import cronjobs

        @cronjobs.handler("fh.bad.execute", max_attempts=0)
        def broken(payload, job):
            return True
    '''), encoding="utf-8")
    with pytest.raises(HandlerError, match=r"broken: MAX_ATTEMPTS must be an integer >= 1, got 0"):
        _registry(bad)

    twice = tmp_path / "twice"
    twice.mkdir()
    (twice / "one.py").write_text(textwrap.dedent('''
        import cronjobs

        @cronjobs.handler("fh.same.execute")
        def first(payload, job):
            return True
    '''), encoding="utf-8")
    (twice / "two.py").write_text(textwrap.dedent('''
        import cronjobs

        @cronjobs.handler("fh.same.execute")
        def second(payload, job):
            return True
    '''), encoding="utf-8")
    with pytest.raises(DuplicateHandlerType) as caught:
        _registry(twice)
    text = str(caught.value)
    assert "'fh.same.execute'" in text and "one.py:first" in text and "two.py:second" in text


def test_a_function_that_cannot_take_payload_and_job_is_refused_at_decoration():
    def nothing():
        return True

    def extra(payload, job, more):
        return True

    for fn in (nothing, extra):
        with pytest.raises(TypeError, match=rf"decorates .*{fn.__name__}\(.*\), which cannot be "
                                            rf"called as fn\(payload, job\)"):
            cronjobs.handler("fh.sig.execute")(fn)

    def fine(payload, job, handler, more=1):
        return True

    assert cronjobs.handler("fh.sig.execute")(fine) is fine
    with pytest.raises(TypeError) as caught:
        cronjobs.handler("fh.x.execute", nope=1)
    assert str(caught.value).count("limit_key") == 1


def _rows(app, job_type: str) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(cronjob_queue).where(cronjob_queue.c.type == job_type)
            .order_by(cronjob_queue.c.id)).mappings()]


@SERVER
def test_a_decorated_function_runs_on_a_schedule_in_a_real_worker_and_shows_everywhere(
        make_app, db_url, namespace, folder):
    app = make_app(clock=FrozenClock(T0), handler_paths=(str(folder),), dashboard_token=TOKEN)
    report = tick(T0)
    [job_id] = [j for task, _, j in report.started if task == "fh-report"]
    fan_id = queue.dispatch("fh.fan.execute", {})
    slow_id = queue.dispatch("fh.slow.execute", {})

    env = cli_env(db_url, namespace, CRONJOBS_HANDLER_PATHS=str(folder))
    proc = subprocess.run([sys.executable, "-m", "cronjobs", "worker", "--burst", "--queues",
                           "default", "--slots", "4", "--isolation", "process"], env=env,
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]

    [row] = [r for r in _rows(app, "fh.report.execute") if r["id"] == job_id]
    assert row["status"] == "completed", row["error"]
    assert json.loads(row["result_payload"])["rows"] == 3
    assert [r["status"] for r in _rows(app, "fh.leaf.execute")] == ["completed", "completed"]
    assert {r["parent_id"] for r in _rows(app, "fh.leaf.execute")} == {fan_id}
    [slow] = _rows(app, "fh.slow.execute")
    assert slow["id"] == slow_id and slow["status"] == "failed"
    assert "runtime" in (slow["error"] or "").lower(), slow["error"]

    listed = {r["type"]: r for r in json.loads(run_cli(["list-handlers", "--json"], env).stdout)}
    assert listed["fh.report.execute"]["source"].endswith("my_little_jobs.py:daily")
    assert listed["fh.report.execute"]["class"] == "daily"
    assert (listed["fh.slow.execute"]["max_runtime"], listed["fh.report.execute"]["frequency"]
            ) == (1, "minute")
    tasks = run_cli(["tasks"], env)
    assert tasks.returncode == 0 and "fh-report" in tasks.stdout, tasks.stdout + tasks.stderr

    client = web_client(app)
    login(client)
    assert "fh-report" in client.get("/tasks").get_data(as_text=True)
    page = client.get("/tasks/fh-report")
    assert page.status_code == 200 and "fh.report.execute" in page.get_data(as_text=True)
    job_page = client.get(f"/jobs/{job_id}?tab=results").get_data(as_text=True)
    assert "REPORT OF 3 ROWS" in job_page
