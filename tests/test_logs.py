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
