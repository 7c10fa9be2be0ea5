"""`cronjobs worker --processes N` as real processes on MariaDB + Redis: its children are
forked from the command's process; a second SIGINT to that process cuts their jobs off at
once, and they stop when it is killed (nothing runs on that its restart would double)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import REDIS, cli_env
from cronjobs import queue
from test_worker_e2e import _tail, wait_for

pytestmark = [pytest.mark.parametrize("backend", ["mariadb"], indirect=True),
              pytest.mark.slow, pytest.mark.core]


def start(db_url: str, namespace: str, log: Path,
          args: tuple[str, ...] = ("--processes", "2", "--slots", "1"),
          **env: str) -> subprocess.Popen:
    """`cronjobs worker --queues default ARGS` (Redis; more environment: `env`), its own
    session, output in `log`; the caller ends it."""
    cmd = [sys.executable, "-m", "cronjobs", "worker", "--queues", "default", *args]
    environ = cli_env(db_url, namespace, broker_url=REDIS,
                      **{"CRONJOBS_LOG_LEVEL": "INFO", **env})
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=environ,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@contextlib.contextmanager
def running(db_url: str, namespace: str, log: Path,
            args: tuple[str, ...] = ("--processes", "2", "--slots", "1"), **env: str):
    """`start(...)`, its whole process group killed when the block ends (whatever the test
    left of it: the worker, its children, fork servers, job processes)."""
    proc = start(db_url, namespace, log, args, **env)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def alive(proc: psutil.Process) -> bool:
    """`proc` runs (it exists and is no zombie)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def is_tracker(proc: psutil.Process) -> bool:
    """`proc` is multiprocessing's resource tracker (ended processes: False)."""
    try:
        return "multiprocessing.resource_tracker" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def children(proc: subprocess.Popen) -> list[psutil.Process]:
    """The worker processes `proc` (`worker --processes N`) forked and runs: its living
    children but the resource tracker it started for them."""
    return [c for c in psutil.Process(proc.pid).children() if alive(c) and not is_tracker(c)]


def both_running(app, ids: list[int]):
    return lambda: all(queue.get(i, app=app)["status"] == "running" for i in ids)


def test_a_second_sigint_to_the_parent_cuts_the_childrens_jobs_off(make_app, db_url,
                                                                   namespace, tmp_path):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with running(db_url, namespace, log) as proc:
        ids = queue.dispatch_many([{"type": "test.slow.execute", "payload": {"seconds": 6}}] * 2,
                                  app=app)
        wait_for(both_running(app, ids), 30, "both jobs running", proc, log)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(4)  # the jobs had 5 s left
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, _tail(log)
        rows = [queue.get(i, app=app) for i in ids]
        assert [(r["status"], r["attempts"]) for r in rows] == [("pending", 0)] * 2, rows


def test_the_children_stop_when_their_parent_is_killed(make_app, db_url, namespace, tmp_path):
    log = tmp_path / "worker.log"
    with running(db_url, namespace, log) as proc:
        kids = wait_for(lambda: len(children(proc)) == 2 and children(proc), 30,
                        "two children", proc, log)
        wait_for(lambda: _tail(log).count("consuming default") == 2, 30, "both consuming",
                 proc, log)
        proc.kill()  # the parent alone, not its process group
        proc.wait(10)
        wait_for(lambda: not any(alive(k) for k in kids), 20, "the children gone")
        assert "Traceback" not in _tail(log), _tail(log)
