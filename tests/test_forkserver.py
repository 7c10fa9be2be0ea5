"""The fork server alone (`cronjobs.worker.forkserver`, started fresh as `python -m
cronjobs.worker.preload`): it forks a child per request and reports its pid and exit status (its
own exit code, or `-9` when killed), its children die with it, and it ends when the
worker's end of its socket closes. A process that runs threads does not fork it (see
`tests/test_forked_fork_server.py`)."""

from __future__ import annotations

import signal
import time
from multiprocessing.connection import Pipe

import psutil
import pytest

from cronjobs.worker.forkserver import Child, ForkServer, ServerGone

pytestmark = pytest.mark.core  # the core subset (make test-core)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait(condition, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def server():
    server = ForkServer.spawn("cronjobs.worker.preload")
    yield server
    server.stop()


def _child(server: ForkServer):
    """A job process that waits for its start message on the pipe we keep."""
    ours, theirs = Pipe()
    try:
        return Child(server, server.start_child(theirs.fileno(), 60)), ours
    finally:
        theirs.close()


def test_a_child_is_forked_by_the_server_and_its_exit_status_reported(server):
    child, ours = _child(server)
    assert psutil.Process(child.pid).ppid() == server.pid
    assert child.is_alive() and child.exitcode is None
    ours.close()  # no start message ever comes: the job process ends with exit code 1
    child.join(10)
    assert child.exitcode == 1
    killed, ours = _child(server)
    killed.kill()
    killed.join(10)
    assert killed.exitcode == -signal.SIGKILL
    assert _gone(child.pid) and _gone(killed.pid)  # reaped by the server
    ours.close()


def test_children_die_with_a_killed_server_and_it_is_known_gone(server):
    child, ours = _child(server)
    psutil.Process(server.pid).kill()
    assert _wait(lambda: _gone(child.pid)), "the child outlived its fork server"
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    assert not server.alive()
    with pytest.raises(ServerGone):
        server.start_child(ours.fileno(), 5)
    ours.close()


def test_the_server_ends_when_the_workers_end_closes():
    server = ForkServer.spawn("cronjobs.worker.preload")
    child, ours = _child(server)  # waits until it serves
    process = psutil.Process(server.pid)
    server.stop()
    assert _gone(server.pid) or not process.is_running()
    assert _wait(lambda: _gone(child.pid))
    ours.close()
