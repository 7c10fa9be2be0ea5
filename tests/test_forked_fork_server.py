"""`cronjobs worker` forks its job processes' fork server from its own process (real
processes on MariaDB + Redis): named `cj-forkserver` for `ps`, its job processes run the
rows, a SIGTERM meant for the worker (`pkill -f 'cronjobs worker'` matches the copied
command line) leaves it serving, it ends with the worker, and one killed is replaced by
one started fresh (a row sent to one of its dead job processes runs again at once);
`--processes 2` forks one per child. No resource tracker runs for the children, their
fork servers or job processes; a job process that leaks a shared-memory segment has it
unlinked by a tracker of its own when it dies. A process that already runs threads never
forks it."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

import psutil
import pytest

from conftest import REDIS, SAMPLE_HANDLERS, effect_rows
from cronjobs import queue
from cronjobs.worker.forkserver import ForkServer
from test_job_processes_on_demand import _fork_servers
from test_job_slots import CRASH_HANDLERS, MISBEHAVE
from test_worker_children import alive, children, is_tracker, running
from test_worker_e2e import RECORD, _stop, _tail, all_completed, job_rows, wait_for

pytestmark = pytest.mark.core  # the core subset (make test-core)

MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


def _run_rows(app, proc, log, done_before: int, count: int, seconds: float = 60,
              watch: Callable[[], object] | None = None) -> set[int]:
    """Dispatch `count` RECORD rows, wait (at most `seconds`) until all rows are completed,
    calling `watch()` after each look at the rows; the pids that ran the new ones."""
    completed = all_completed(app, done_before + count)

    def done() -> bool:
        finished = completed()
        if watch is not None:
            watch()
        return finished

    queue.dispatch_many([{"type": RECORD, "payload": {}}] * count, app=app)
    wait_for(done, seconds, f"{count} more jobs", proc, log)
    return {row["pid"] for row in effect_rows(app, "record")[done_before:]}


@MARIADB
@pytest.mark.slow
def test_the_forked_fork_server_runs_the_jobs_ignores_sigterm_and_ends_with_the_worker(
        make_app, db_url, namespace, tmp_path):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with running(db_url, namespace, log, ("--slots", "2")) as proc:
        [server] = wait_for(lambda: _fork_servers(proc.pid), 30, "the fork server", proc, log)
        assert server.name() == "cj-forkserver", "forked from the worker, not started anew"
        used = _run_rows(app, proc, log, 0, 4)
        jobs = {c.pid: c.name() for c in server.children()}
        assert used <= set(jobs), (used, jobs)
        assert set(jobs.values()) == {"cj-job"}
        server.send_signal(signal.SIGTERM)  # what `pkill -f 'cronjobs worker'` sends it too
        used_after = _run_rows(app, proc, log, 4, 4)
        assert alive(server) and used_after <= {c.pid for c in server.children()}
        assert _stop(proc) == 0, _tail(log)
        wait_for(lambda: not alive(server), 10, "the fork server ended with the worker")


@MARIADB
@pytest.mark.slow
def test_a_killed_fork_server_is_replaced_by_a_fresh_one(make_app, db_url, namespace,
                                                          tmp_path):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with running(db_url, namespace, log, ("--slots", "2")) as proc:
        [server] = wait_for(lambda: _fork_servers(proc.pid), 30, "the fork server", proc, log)
        _run_rows(app, proc, log, 0, 2)
        server.kill()
        wait_for(lambda: not alive(server), 10, "the killed fork server gone")
        # The row first goes to an idle job process that died with the fork server, comes
        # back `pending` at once (attempt not used) and is claimed again right away (not
        # by the sweep, 30 s later), then runs in a job process of a fresh fork server.
        used = _run_rows(app, proc, log, 2, 1, seconds=10)
        assert "its job process had died while idle" in log.read_text()
        assert job_rows(app)[-1]["attempts"] == 1, "the attempt given back"
        [fresh] = _fork_servers(proc.pid)
        assert "cronjobs.worker.preload" in fresh.cmdline()
        assert used <= {c.pid for c in fresh.children()}
        assert _stop(proc) == 0, _tail(log)


@MARIADB
@pytest.mark.slow
def test_each_child_of_processes_2_forks_its_own(make_app, db_url, namespace, tmp_path):
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    with running(db_url, namespace, log, ("--processes", "2", "--slots", "2")) as proc:
        kids = wait_for(lambda: len(children(proc)) == 2 and children(proc), 30,
                        "two children", proc, log)
        servers = wait_for(lambda: all(_fork_servers(k.pid) for k in kids)
                           and [_fork_servers(k.pid)[0] for k in kids], 30,
                           "a fork server per child", proc, log)
        assert [s.name() for s in servers] == ["cj-forkserver"] * 2
        used = _run_rows(app, proc, log, 0, 8)
        assert used <= {c.pid for s in servers for c in s.children()}
        assert _stop(proc) == 0, _tail(log)


def _job_processes(kids: list[psutil.Process], seen: dict[int, str]) -> None:
    """Add the living job processes of the `kids`' fork servers to `seen` (pid -> how its
    fork server began: "forked" from the worker or started "fresh")."""
    for server in (s for k in kids for s in _fork_servers(k.pid)):
        with contextlib.suppress(psutil.Error):  # ended while we looked
            began = "fresh" if "cronjobs.worker.preload" in server.cmdline() else "forked"
            seen.update(dict.fromkeys((c.pid for c in server.children()), began))


def _trackers(pid: int) -> list[psutil.Process]:
    """The resource trackers in the process tree of `pid`, and its zombie children (a
    tracker that ended and was not reaped)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if is_tracker(child) or (child.status() == psutil.STATUS_ZOMBIE
                                     and child.ppid() == pid):
                found.append(child)
        except psutil.Error:  # ended while we looked
            pass
    return found


@MARIADB
@pytest.mark.slow
def test_no_resource_tracker_runs_for_the_children_their_fork_servers_or_job_processes(
        make_app, db_url, namespace, tmp_path):
    # multiprocessing's tracker is a Python interpreter of its own (~6.8 MB of PSS): none
    # for the children, their forked fork servers, the fresh ones started after those
    # retired, or their job processes.
    app = make_app(broker_url=REDIS)
    log = tmp_path / "worker.log"
    # The first rows wait before the worker starts, so its children claim them at once:
    # a forked fork server with no job process for the test's 1 s retires, and on a loaded
    # machine the rows dispatched after the children were seen came later than that.
    queue.dispatch_many([{"type": RECORD, "payload": {}}] * 8, app=app)
    completed = all_completed(app, 8)
    with running(db_url, namespace, log, ("--processes", "2", "--slots", "2"),
                 CRONJOBS_JOB_PROCESS_IDLE_SECONDS="1") as proc:
        # Listed while the rows run (after each look at them: a process whose row is done
        # is idle < 1 s), not after: one idle for the test's 1 s may have ended by then.
        seen: dict[int, str] = {}

        def done() -> bool:
            finished = completed()
            _job_processes(children(proc), seen)
            return finished

        wait_for(done, 60, "the 8 rows waiting at start", proc, log)
        used = {row["pid"] for row in effect_rows(app, "record")}
        kids = wait_for(lambda: len(children(proc)) == 2 and children(proc), 30,
                        "two children", proc, log)
        assert used <= set(seen), (used, seen)
        assert {seen[pid] for pid in used} == {"forked"}
        assert _trackers(proc.pid) == []
        wait_for(lambda: not any(_fork_servers(k.pid) for k in kids), 30,
                 "the fork servers retired", proc, log)
        seen.clear()  # fresh fork servers now
        used = _run_rows(app, proc, log, 8, 8, watch=lambda: _job_processes(kids, seen))
        assert used <= set(seen), (used, seen)
        assert {seen[pid] for pid in used} == {"fresh"}
        assert _trackers(proc.pid) == []
        assert _stop(proc) == 0, _tail(log)


@MARIADB
def test_a_job_process_that_leaks_a_shared_memory_segment_has_it_unlinked_when_it_dies(
        make_app, db_url, namespace, tmp_path):
    # What the shared tracker did at the worker's end, the job process's own tracker
    # (started when its handler registered the segment) does when that process ends.
    app = make_app(broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, CRASH_HANDLERS))
    log = tmp_path / "worker.log"
    name = f"cj-test-{namespace}"
    env = {"CRONJOBS_HANDLER_PATHS": os.pathsep.join((SAMPLE_HANDLERS, CRASH_HANDLERS))}
    with running(db_url, namespace, log, ("--slots", "2"), **env) as proc, \
            contextlib.ExitStack() as cleanup:
        cleanup.callback(lambda: os.path.exists(f"/dev/shm/{name}")
                         and os.unlink(f"/dev/shm/{name}"))  # whatever happens
        job_id = queue.dispatch(MISBEHAVE, {"do": "leak", "name": name}, app=app)
        wait_for(lambda: queue.get(job_id, ["status"], app=app)["status"] == "failed", 30,
                 "the job's process died", proc, log)
        wait_for(lambda: not os.path.exists(f"/dev/shm/{name}"), 10,
                 "the segment unlinked while the worker runs", proc, log)
        assert _trackers(proc.pid) == []  # that tracker ended with its job process
        assert _stop(proc) == 0, _tail(log)


def test_a_process_running_threads_does_not_fork_it():
    forked: list[int] = []
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        before = psutil.Process().children()
        assert ForkServer.fork(lambda sock: forked.append(os.getpid())) is None
        assert psutil.Process().children() == before and forked == []
    finally:
        stop.set()
        thread.join()
