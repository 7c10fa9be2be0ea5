"""Process logging: one stderr handler in our format at the settings' level; a process
that logs so already (a job process forked from a fork server that set it up) is left as
it is; a handler's lines in a job process are written once, in that format."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import pytest

from conftest import SAMPLE_HANDLERS, cli_env, run_cli
from cronjobs import logs

CRASH_HANDLERS = str(Path(__file__).parent / "crash_handlers")


@pytest.fixture
def root_logging():
    """The root logger's handlers and level, put back after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_second_setup_at_the_same_level_changes_nothing(root_logging):
    logs.setup("warning")
    handler = root_logging.handlers[0]
    logs.setup("WARNING")
    assert root_logging.handlers == [handler] and root_logging.level == logging.WARNING


def test_another_level_or_another_handler_gets_a_new_setup(root_logging):
    logs.setup("WARNING")
    first = root_logging.handlers[0]
    logs.setup("INFO")
    assert root_logging.level == logging.INFO and root_logging.handlers[0] is not first
    root_logging.addHandler(logging.NullHandler())
    logs.setup("INFO")
    assert len(root_logging.handlers) == 1
    assert root_logging.handlers[0].stream is sys.stderr


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_job_process_writes_a_handlers_line_once_in_the_format(make_app, db_url):
    from cronjobs import queue

    app = make_app(handler_paths=(SAMPLE_HANDLERS, CRASH_HANDLERS))
    ids = [queue.dispatch("test.misbehave.execute", {"do": "log", "line": f"line {i}"},
                          app=app) for i in range(3)]
    env = cli_env(db_url, CRONJOBS_HANDLER_PATHS=os.pathsep.join(
        (SAMPLE_HANDLERS, CRASH_HANDLERS)))
    done = run_cli(["worker", "--burst", "--slots", "2"], env)
    assert done.returncode == 0, done.stderr
    for i in range(len(ids)):
        lines = [line for line in done.stderr.splitlines() if line.endswith(f"line {i}")]
        assert len(lines) == 1, done.stderr
        assert re.fullmatch(rf"\d{{4}}-\d\d-\d\d [\d:,]+ WARNING test\.misbehave "
                            rf"\[trace=-\] line {i}", lines[0]), lines[0]


BURST_FROM_CODE = """
import sys
from cronjobs import queue
from cronjobs.app import App
from cronjobs.worker.burst import run_burst
from cronjobs.config import Settings
app = App(Settings.load(log_level="INFO", database_url=sys.argv[1],
                        handler_paths=tuple(sys.argv[2:])))
job_id = queue.dispatch("test.misbehave.execute", {"do": "log", "line": "from code"}, app=app)
code, report = run_burst(app, ["default"], 1)
print(code, queue.get(job_id, ["status"], app=app)["status"])
"""


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_worker_from_code_runs_jobs_whatever_log_level_the_environment_has(make_app,
                                                                            db_url):
    # The fork server builds its App from the environment: an unknown level there makes it
    # build none (the job processes build the worker's), never stops it.
    import subprocess

    make_app()
    env = cli_env(db_url, CRONJOBS_LOG_LEVEL="VERBOSE")
    done = subprocess.run([sys.executable, "-c", BURST_FROM_CODE, db_url, SAMPLE_HANDLERS,
                           CRASH_HANDLERS], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["0", "completed"], done.stderr
    assert done.stderr.count("from code") == 1, done.stderr
