"""Each command imports what it needs and no more (CLI start-up time): `--help` no
SQLAlchemy or pydantic, `get` no broker, ORM or handler libraries, `tick` Dramatiq only
when it rings a queue, none of them the dashboard or the scheduler's APScheduler; the
garbage collector is off while a command imports its libraries."""

from __future__ import annotations

import gc
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli_env

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

# Runs the CLI and, at exit, writes the names of every module it imported to argv[1].
PROBE = ("import atexit, sys; from pathlib import Path; out = Path(sys.argv.pop(1)); "
         "atexit.register(lambda: out.write_text('\\n'.join(sorted(sys.modules)))); "
         "from cronjobs.cli import main; main(prog_name='cronjobs')")
HEAVY = {"flask", "apscheduler", "alembic", "babel", "jinja2", "cryptography",
         "prometheus_client", "sqlalchemy.orm"}


def imported(args: list[str], env: dict, tmp_path: Path) -> set[str]:
    """The modules `cronjobs ARGS` imported (it must exit 0 or, `health`, report)."""
    out = tmp_path / "modules.txt"
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1, 2) and "Traceback" not in done.stderr, done.stderr
    return set(out.read_text().split())


def test_help_imports_neither_sqlalchemy_nor_pydantic(db_url, tmp_path):
    modules = imported(["--help"], cli_env(db_url), tmp_path)
    assert "click" in modules and "cronjobs.cli" in modules
    # `cronjobs.handler` (the contract: json, dataclasses, markupsafe) is imported with the
    # package, which binds the `@cronjobs.handler` decorator over the submodule's name.
    assert not modules & (HEAVY | {"sqlalchemy", "pydantic", "dramatiq", "redis", "psutil",
                                   "cronjobs.app", "registry"})


def test_get_imports_no_broker_no_orm_no_handler_libraries(make_app, db_url, tmp_path):
    from cronjobs import queue

    job_id = queue.dispatch("test.summary.execute", {}, app=make_app())
    modules = imported(["get", str(job_id)], cli_env(db_url), tmp_path)
    assert "sqlalchemy" in modules and "cronjobs.store" in modules
    assert not modules & (HEAVY | {"dramatiq", "redis", "psutil", "cronjobs.broker",
                                   "cronjobs.job.executor", "cronjobs.schedule.scheduler"})
    assert not [m for m in modules if m.startswith("handlers.")]  # no handler module loaded


def test_dispatch_imports_the_broker_to_ring_its_queue(db_url, tmp_path):
    modules = imported(["dispatch", "test.summary.execute"], cli_env(db_url), tmp_path)
    assert {"dramatiq", "cronjobs.broker", "handlers.HttpUptimeExecute"} <= modules
    assert not modules & (HEAVY | {"psutil", "cronjobs.job.executor"})


def test_tick_imports_dramatiq_only_when_it_starts_a_task(db_url, tmp_path):
    env = cli_env(db_url)
    first = imported(["tick", "--now", "2030-01-01T00:00"], env, tmp_path)
    assert {"cronjobs.schedule.scheduler", "dramatiq"} <= first  # it started the minute tasks
    assert not first & HEAVY
    again = imported(["tick", "--now", "2030-01-01T00:00"], env, tmp_path)  # nothing due
    assert "cronjobs.schedule.scheduler" in again and not again & (HEAVY | {"dramatiq", "redis"})


def test_health_imports_no_broker_client_for_the_memory_broker(db_url, tmp_path):
    modules = imported(["health"], cli_env(db_url), tmp_path)
    assert {"cronjobs.health", "psutil"} <= modules
    assert not modules & (HEAVY | {"dramatiq", "redis"})


def test_a_sqlite_command_loads_no_other_dialect_and_no_url_opener(
        db_url, tmp_path):
    # Another dialect's modules (PostgreSQL's ~23 ms) load only on that database; the
    # uptime handler loads urllib when it runs a check, not when the registry imports it.
    modules = imported(["dispatch", "test.summary.execute"], cli_env(db_url), tmp_path)
    assert {"sqlalchemy.dialects.sqlite", "handlers.HttpUptimeExecute"} <= modules
    assert not modules & {"sqlalchemy.dialects.postgresql", "psycopg", "pymysql",
                          "urllib.request", "http.client"}


# Runs the CLI and writes what the collector did to argv[1] as JSON: the collections from
# the start of `run` (the console script's function) to the command's App
# (`_collect_from_now`), whether the collector was on then and after, and whether it was
# on when the burst started (`_run_burst`).
GC_PROBE = """
import atexit, gc, json, sys
from pathlib import Path
out, seen = Path(sys.argv.pop(1)), {"collections": 0}
gc.callbacks.append(lambda phase, info: phase == "stop" and seen.update(
    collections=seen["collections"] + 1))
from cronjobs.cli import base, run, workers
def collect_from_now(real=base._collect_from_now):
    seen.update(before_app=seen["collections"], on_before_app=gc.isenabled())
    real()
    seen["on_after_app"] = gc.isenabled()
def run_burst(*args, real=workers._run_burst):
    seen["on_in_burst"] = gc.isenabled()
    real(*args)
base._collect_from_now, workers._run_burst = collect_from_now, run_burst
atexit.register(lambda: out.write_text(json.dumps(seen)))
seen["collections"] = 0
run()
"""


def collector(args: list[str], env: dict, tmp_path: Path) -> dict:
    """What the collector did while `cronjobs ARGS` ran (see GC_PROBE)."""
    out = tmp_path / "gc.json"
    done = subprocess.run([sys.executable, "-c", GC_PROBE, str(out), *args], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(out.read_text())


def test_a_command_imports_with_the_collector_off_and_runs_with_it_on(db_url, tmp_path):
    # Its imports run without a collection (each went over every object imported so far:
    # ~35 ms of a `get`); from its App on, the collector runs as usual.
    seen = collector(["get", "1"], cli_env(db_url), tmp_path)
    assert seen["before_app"] == 0 and seen["on_before_app"] is False
    assert seen["on_after_app"] is True


def test_a_long_running_command_runs_its_loop_with_the_collector_on(db_url, tmp_path):
    seen = collector(["worker", "--burst", "--slots", "1"], cli_env(db_url), tmp_path)
    assert seen["before_app"] == 0 and seen["on_in_burst"] is True


@pytest.mark.parametrize("args", [["--help"], ["get", "1"]])
def test_main_called_in_process_leaves_the_collector_alone(make_app, args):
    # Only the command's own process (`run`: the console script, `python -m cronjobs`)
    # turns it off, on and freezes it; `main` from code (tests, embedding) does not.
    from click.testing import CliRunner

    from cronjobs import queue
    from cronjobs.cli import main

    queue.dispatch("test.summary.execute", {}, app=make_app())
    # A gc.freeze() would move this object where gc.get_objects() no longer lists it (the
    # session's own freeze, tests/conftest.py, makes the frozen count drop as frozen
    # objects are freed, so the count alone cannot tell).
    sentinel = [[]]
    root = logging.getLogger()  # the command sets logging up: put it back for later tests
    handlers, level = root.handlers[:], root.level
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            assert CliRunner().invoke(main, args).exit_code == 0
            assert gc.isenabled() is enabled
            assert any(o is sentinel for o in gc.get_objects())
    finally:
        gc.enable()
        root.handlers[:] = handlers
        root.setLevel(level)
