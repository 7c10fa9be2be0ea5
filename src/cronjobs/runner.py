"""Job processes: forked from a preloaded fork server, one job at a time, hard MAX_RUNTIME.

Dramatiq's TimeLimit only interrupts Python bytecode, so a handler blocked in a system
call or a C loop would never stop in a worker thread. Here the worker sends the `Job` to
an idle job process over a pipe and waits at most MAX_RUNTIME plus a short grace for the
outcome:

- at MAX_RUNTIME the job process's own alarm (SIGALRM) interrupts the handler, even in a
  blocked system call; it reports `timeout after N s` and exits (`cronjobs.jobprocess`);
- if no outcome comes `KILL_GRACE_SECONDS` later (a C loop that signals cannot reach, a
  handler that blocks SIGALRM), the worker kills the process with SIGKILL, which always
  works; so does the process's own kill timer (`killtimer`), should the worker be frozen
  (`kill -STOP`, a stuck host): a process gone by its own deadline is a `timeout` too
  (`JobProcess.ended_by_own_deadline`), not a crash.

Either way the row is retried or failed with `timeout after N s`, the process is replaced,
and no second copy of the job can start while the first lives (the kill comes first; the
retry is due minutes later). Job processes are forked by multiprocessing's fork server,
which imported the engine and the built-in handlers once (`set_forkserver_preload`), so
their memory pages are shared and a new one starts in milliseconds. The fork server is a
single-threaded process: forking it is safe, unlike forking a threaded worker.

multiprocessing's fork server is a new interpreter (started with `exec`), so it can be
started at any time, also in a worker that runs threads: `start_fork_server()` starts it
at once and returns, and it loads the handlers in the background. `cronjobs worker` forks
it from its own process instead, once it has imported everything and before it starts a
thread (`start_fork_server(fork=True)`, `forkedserver`): no second import, and shared
pages. A worker whose job processes have all ended for a while stops it
(`stop_fork_server()`); the next job process starts it again, the stock way. Importing
this module imports little (the job process's module is imported when a process is made).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from .killtimer import KILL_GRACE_SECONDS

if TYPE_CHECKING:
    from .config import Settings
    from .context import Runtime
    from .handler import Job

__all__ = ["KILL_GRACE_SECONDS", "READY", "START_TIMEOUT_SECONDS", "JobProcess",
           "skip_resource_tracker", "start_fork_server",
           "stop_fork_server"]

_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["cronjobs.preload"])
START_TIMEOUT_SECONDS = 60
READY = "ready"  # what a job process sends once it can take jobs (`jobprocess.READY`)
_LOCK = threading.Lock()  # job processes are not started while the fork server stops
_LIVE: set[int] = set()  # ids of the JobProcess objects not yet killed, in this process
_LEAN_SERVERS: set[int] = set()  # pids of the fork servers that take a lean start


@functools.cache
def _lean_process() -> type[multiprocessing.Process]:
    """The `Process` class of job processes: multiprocessing's start by the fork server,
    except that the fork server's child is sent the worker's settings (their key and
    pickle) and runtime instead of multiprocessing's preparation data and `Process`
    object (`jobprocess._serve_one` reads them), and is handed the child's end of the pipe. The
    rest (the pid, the exit code, the sentinel, kill and join) is multiprocessing's.
    Where the fork server cannot take it (`_lean_server`), the stock start. Made on first
    use: importing this module imports little."""
    from multiprocessing import forkserver, popen_forkserver, util

    from .jobprocess import LEAN_HEADER, LEAN_START, settings_key

    class LeanPopen(popen_forkserver.Popen):
        def _launch(self, process_obj: multiprocessing.Process) -> None:
            if not _lean_server():  # the stock start, of a plain (picklable) Process
                super()._launch(_CTX.Process(
                    target=process_obj._target, args=process_obj._args,
                    name=process_obj.name, daemon=process_obj.daemon))
                return
            child_end, settings, runtime = process_obj._args
            parts = (settings_key(settings), pickle.dumps(settings), pickle.dumps(runtime))
            self._fds.append(child_end.fileno())
            self.sentinel, w = forkserver.connect_to_new_process(self._fds)
            self.finalizer = util.Finalize(self, util.close_fds, (self.sentinel,))
            with open(w, "wb", closefd=True) as f:
                f.write(b"".join((LEAN_START, LEAN_HEADER.pack(*map(len, parts)), *parts)))
            self.pid = forkserver.read_signed(self.sentinel)

    class LeanProcess(_CTX.Process):
        @staticmethod
        def _Popen(process_obj: multiprocessing.Process) -> LeanPopen:
            return LeanPopen(process_obj)

    return LeanProcess


def _ensure_fork_server() -> int:
    """Start the fork server unless it runs (multiprocessing's own start); returns its
    pid. One this process starts with `cronjobs.preload` in its preload list takes lean
    starts (`_LEAN_SERVERS`); one a program started before, or with a list of its own,
    does not."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    before = server._forkserver_pid
    server.ensure_running()
    pid = server._forkserver_pid
    if pid != before and "cronjobs.preload" in (server._preload_modules or ()):
        _LEAN_SERVERS.add(pid)
    return pid


def _lean_server() -> bool:
    """Whether a job process can start lean: the fork server (started now if need be)
    runs `jobprocess._serve_one`, and this process's main is the `cronjobs` command's. A
    program's own main script may register handlers, which job processes get only from
    multiprocessing's start, which imports that script again."""
    from .jobprocess import LEAN_PYTHON

    command = _command_main()
    if command:
        skip_resource_tracker()
    return _ensure_fork_server() in _LEAN_SERVERS and command and LEAN_PYTHON


def _command_main() -> bool:
    """Whether this process runs a `cronjobs` command (its main is `cronjobs.__main__`,
    also the console script's, once `_main_as_module` named it so). A program that runs a
    worker from code keeps multiprocessing's resource tracker and its stock start."""
    import sys

    _main_as_module()
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "cronjobs.__main__"


def start_fork_server(fork: bool = False) -> None:
    """Start the fork server of this process's job processes unless it runs already, and
    return at once: it imports the engine and the handlers and builds the App in the
    background (a job process asked for meanwhile waits for it). Safe in a process with
    threads: the fork server is a new interpreter, not a fork of this one.

    Args:
        fork: fork the fork server from this process instead, when it can be done
            (`forkedserver.fork_fork_server`: this process runs one thread and has
            imported what the job processes need, handlers loaded).
    """
    from multiprocessing import forkserver

    from .forkedserver import fork_fork_server

    if _command_main():
        skip_resource_tracker()
    if fork and fork_fork_server():
        _LEAN_SERVERS.add(forkserver._forkserver._forkserver_pid)
    else:
        _ensure_fork_server()


def stop_fork_server() -> bool:
    """Stop the fork server when no job process of this process lives (a job process dies
    with the fork server, its parent); the next job process starts it again. A resource
    tracker is left alone: none runs for the worker (`skip_resource_tracker`), and one
    that runs was started by the program that runs the worker (stopping it unlinked that
    program's live shared memory).

    Returns:
        True when it was running and has stopped.
    """
    from multiprocessing import forkserver

    server = forkserver._forkserver  # the ones multiprocessing keeps per process
    with _LOCK:
        if _LIVE or server._forkserver_pid is None:
            return False
        server._stop()  # closes its "alive" pipe: it exits; reaped here
        return True


def skip_resource_tracker() -> None:
    """Spare this process multiprocessing's resource tracker, unless one runs already: a
    Python interpreter of its own (a process's worth of PSS) that multiprocessing starts with the
    fork server and hands to every process the fork server starts, to unlink the named
    semaphores and shared-memory segments they registered and leaked, once all of them
    have ended.

    Neither the worker nor its job processes register any; a handler may. This process's
    tracker becomes `/dev/null` (multiprocessing sees one that runs, and what it is told
    goes nowhere); a job process handed it drops it (`jobprocess._serve_one`), so a job
    whose handler registers such a resource starts a tracker of its own, which unlinks
    what is left when that job process ends (also killed at MAX_RUNTIME), not when the
    worker does. Resources registered by the worker process itself (a thread handler's)
    are not tracked. Forked children (`--processes N`) inherit the stand-in. The
    `cronjobs` commands call it; a program that runs a worker from code keeps
    multiprocessing's tracker (its own resources may rely on it).
    """
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    with tracker._lock:
        if tracker._fd is None:
            tracker._fd, tracker._pid = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC), None


def _main_as_module() -> None:
    """Spare each job process a run of the `cronjobs` console script.

    multiprocessing runs the parent's main script again in every new process unless the
    parent was started as a module (`python -m cronjobs`): for the console script that is
    an import of the CLI and click per job process (time and memory each), for nothing a
    job needs. The console script's main is named as `cronjobs.__main__` (what `python -m
    cronjobs` runs, which a job process skips). Any other main script (a program that
    starts a worker from code, and may define handlers there) is left as it is."""
    import importlib.util
    import os
    import sys

    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or ""
    if main is not None and getattr(main, "__spec__", None) is None \
            and os.path.basename(script) == "cronjobs":
        main.__spec__ = importlib.util.find_spec("cronjobs.__main__")


class JobProcess:
    """One job process and the worker's end of its pipe.

    `conn` becomes readable when the process is ready (after start-up: `READY`) and when a
    job's outcome is there; `read()` returns what came. States: `idle` (since
    `idle_since`, a `time.monotonic()`), `busy` (a job was sent; `ready` tells whether the
    process has said `READY`, and so whether the job runs yet), `ended` (out of its slot:
    its job ended with it).

    Args:
        settings: the worker's settings. When they equal the fork server's (the `cronjobs
            worker` and `cronjobs serve` commands: both read one environment), the
            process runs jobs with the App the fork server preloaded, sharing its pages;
            otherwise (a worker started from code with other settings) it builds an App
            of its own, with its own handler registry, before it says it is ready.
        runtime: handed to every job's `JobContext` (the serve URL).
    """

    def __init__(self, settings: Settings, runtime: Runtime) -> None:
        from .jobprocess import serve  # lazy: worker start-up time (see the module)

        self.conn, child_end = _CTX.Pipe()
        self.process = _lean_process()(target=serve, args=(child_end, settings, runtime),
                                          name="cronjobs-job", daemon=True)
        with _LOCK:
            self.process.start()
            _LIVE.add(id(self))
        child_end.close()
        self.state, self.ready = "idle", False
        self.started_at = self.idle_since = time.monotonic()
        self.job: Job | None = None
        self.max_runtime = 0.0
        self.sent_at = self.started_at  # when the job was sent: before its process got it
        self.deadline = self.started_at + START_TIMEOUT_SECONDS

    def start(self, job: Job, max_runtime_seconds: float) -> None:
        """Send `job`; its outcome is due within MAX_RUNTIME + `KILL_GRACE_SECONDS` from
        now, or, when the process is not ready yet, from its `READY` (`begin()`), which is
        due within `START_TIMEOUT_SECONDS`."""
        self.job, self.state = job, "busy"
        self.max_runtime = max_runtime_seconds
        self.started_at = self.sent_at = time.monotonic()
        if self.ready:
            self.deadline = self.started_at + max_runtime_seconds + KILL_GRACE_SECONDS
        else:
            self.deadline = self.started_at + START_TIMEOUT_SECONDS
        # pickle's own, not the Connection's `send`: a multiprocessing pickler copies
        # its table of reducers for every message, for nothing a Job holds.
        self.conn.send_bytes(pickle.dumps((job, max_runtime_seconds), pickle.HIGHEST_PROTOCOL))

    def begin(self) -> None:
        """The process said `READY`: a job sent before runs from now (its deadline too)."""
        self.ready = True
        if self.state == "busy":
            self.started_at = time.monotonic()
            self.deadline = self.started_at + self.max_runtime + KILL_GRACE_SECONDS

    def ended_by_own_deadline(self) -> bool:
        """Whether the process, now ended (`process.exitcode` known), was killed by its
        own kill timer (`killtimer`): by SIGKILL, at least MAX_RUNTIME +
        `KILL_GRACE_SECONDS` after its job was sent, which is before the process armed the
        timer, so a process that did end that way is never taken for a crash. A SIGKILL
        from elsewhere that late (the OOM killer) counts as the timeout it would have met."""
        return (self.process.exitcode == -signal.SIGKILL and time.monotonic() - self.sent_at
                >= self.max_runtime + KILL_GRACE_SECONDS)

    def read(self) -> Any:
        """What the process sent: `READY`, or `(job id, outcome, keep_going)`.

        Raises:
            EOFError, OSError: the process died (or was killed).
        """
        return self.conn.recv()

    def end(self, timeout_seconds: float = 5.0) -> None:
        """Wait up to `timeout_seconds` for a process that ends (after a timeout, or told
        to stop); kill it if it lingers."""
        self.process.join(timeout_seconds)
        self.kill()

    def kill(self) -> None:
        """SIGKILL the process (if alive), reap it, close the pipe."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()
        _LIVE.discard(id(self))

    def stop(self) -> None:
        """Ask an idle process to end (it finishes nothing: it has no job)."""
        try:
            self.conn.send(None)
        except OSError:
            pass
