"""Job processes: forked from a preloaded fork server, one job at a time, hard MAX_RUNTIME.

Dramatiq's TimeLimit only interrupts Python bytecode, so a handler blocked in a system
call or a C loop would never stop in a worker thread. Here the worker sends the `Job` to
an idle job process over a pipe and waits at most MAX_RUNTIME plus a short grace for the
outcome:

- at MAX_RUNTIME the job process's own alarm (SIGALRM) interrupts the handler, even in a
  blocked system call; it reports `timeout after N s` and exits (`cronjobs.worker.jobprocess`);
- if no outcome comes `KILL_GRACE_SECONDS` later (a C loop that signals cannot reach, a
  handler that blocks SIGALRM), the worker kills the process with SIGKILL, which always
  works; so does the process's own kill timer (`killtimer`), should the worker be frozen
  (`kill -STOP`, a stuck host): a process gone by its own deadline is a `timeout` too
  (`JobProcess.ended_by_own_deadline`), not a crash.

Either way the row is retried or failed with `timeout after N s`, the process is replaced,
and no second copy of the job can start while the first lives (the kill comes first; the
retry is due minutes later). Job processes are forked by the project's own fork server
(`forkserver`), which imported the engine and the built-in handlers and built the App
once (`jobprocess.preload`), so their memory pages are shared and a new one starts in
milliseconds. The fork server is a single-threaded process: forking it is safe, unlike
forking a threaded worker.

`cronjobs worker` forks the fork server from its own process once it has imported
everything and before it starts a thread (`start_fork_server(fork=True)`): no second
import, and shared pages. Elsewhere, or whenever one is needed again later (after it
retired, or died), it is started fresh (`python -m cronjobs.worker.preload`), which can be done
in a process that runs threads: `start_fork_server()` returns at once and it loads the
handlers in the background (a job process asked for meanwhile waits for it). A worker
whose job processes have all ended for a while stops it (`stop_fork_server()`). No
resource tracker runs for any of them: a job process whose handler registers a named
semaphore or shared-memory segment starts one of its own, which unlinks what is left when
that process ends. Importing this module imports little (the job process's module is
imported when a process is made).
"""

from __future__ import annotations

import pickle
import signal
import threading
import time
from multiprocessing.connection import Pipe
from typing import TYPE_CHECKING, Any

from .forkserver import Child, ForkServer
from .killtimer import KILL_GRACE_SECONDS

if TYPE_CHECKING:
    from ..config import Settings
    from ..handler import Job
    from ..job.context import Runtime

__all__ = ["KILL_GRACE_SECONDS", "NOT_READY", "READY", "START_TIMEOUT_SECONDS", "JobProcess",
           "start_fork_server", "stop_fork_server"]

START_TIMEOUT_SECONDS = 60
READY = "ready"  # what a job process sends once it can take jobs (`jobprocess.READY`)
NOT_READY = "not ready: "  # + why: what one that cannot load its App sends instead
_LOCK = threading.Lock()  # job processes are not started while the fork server stops
_LIVE: set[int] = set()  # ids of the JobProcess objects not yet killed, in this process
_SERVER: ForkServer | None = None  # this process's fork server (under _LOCK)


def start_fork_server(fork: bool = False) -> None:
    """Start the fork server of this process's job processes unless it runs already, and
    return at once: it imports the engine and the handlers and builds the App in the
    background (a job process asked for meanwhile waits for it). A fork server found
    dead (killed) is replaced.

    Args:
        fork: fork the fork server from this process instead, when it can be done (this
            process runs one thread and has imported what the job processes need,
            handlers loaded): no second import, and shared pages.
    """
    with _LOCK:
        _running_server(fork)


def _running_server(fork: bool = False) -> ForkServer:
    """The fork server, started if it does not run (`_LOCK` held)."""
    global _SERVER
    if _SERVER is not None and not _SERVER.alive():
        _SERVER = None  # died (reaped): its job processes died with it
    if _SERVER is None:
        from .jobprocess import run_server  # lazy: see the module

        if fork:
            import gc

            gc.freeze()  # its collector (and the job processes') never copies these pages
            _SERVER = ForkServer.fork(run_server)
        if _SERVER is None:
            _SERVER = ForkServer.spawn("cronjobs.worker.preload")
    return _SERVER


def stop_fork_server() -> bool:
    """Stop the fork server when no job process of this process lives (a job process dies
    with the fork server, its parent); the next job process starts it again.

    Returns:
        True when it was running and has stopped.
    """
    global _SERVER
    with _LOCK:
        if _LIVE or _SERVER is None:
            return False
        server, _SERVER = _SERVER, None
        server.stop()
        return True


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
        from .jobprocess import start_message  # lazy: worker start-up time (see the module)

        self.conn, child_end = Pipe()
        self.conn.send_bytes(start_message(settings, runtime))  # waits in the pipe
        try:
            with _LOCK:
                server = _running_server()
                self.process = Child(server, server.start_child(child_end.fileno(),
                                                                START_TIMEOUT_SECONDS))
                _LIVE.add(id(self))
        except BaseException:
            self.conn.close()
            raise
        finally:
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
        """SIGKILL the process (if alive), wait for the fork server to reap it, close the
        pipe."""
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
