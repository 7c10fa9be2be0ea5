"""Hard MAX_RUNTIME: every worker thread runs its job in a child process of its own.

Dramatiq's TimeLimit only interrupts Python bytecode, so a handler blocked in a system
call (`time.sleep`, a socket read without timeout, a C loop) would never stop. Here the
worker thread claims the row, sends the `Job` to its child process over a pipe and waits
at most MAX_RUNTIME seconds for the outcome. When the time is up the child is killed
(SIGKILL, which always works) and replaced, and the row is retried or failed with
`timeout after N s`. The thread itself never blocks in handler code, so the worker keeps
serving other jobs and can always shut down.

Children ignore SIGINT/SIGTERM (the worker decides when they stop) and die with their
parent (PR_SET_PDEATHSIG), so a `kill -9` of the worker leaves no orphan running a job.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

from .config import Settings
from .handler import Job
from .outcome import Outcome

log = logging.getLogger("cronjobs.worker")

_CTX = multiprocessing.get_context("spawn")  # no fork of a threaded process
_READY = "ready"
START_TIMEOUT_SECONDS = 120


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the pipe's EOF still ends the loop
        pass


def _child_main(conn: Connection, settings: Settings) -> None:
    """Child loop: receive a Job, run its handler, send back the Outcome; None ends it."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from . import logs
    from .app import App
    from .executor import call_handler

    logs.setup(settings.log_level)
    app = App(settings)
    app.handlers  # noqa: B018  (load the registry before the first job, not during it)
    conn.send(_READY)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(call_handler(app, job))


class _Child:
    """One child process and our end of its pipe."""

    def __init__(self, settings: Settings) -> None:
        self.conn, child_end = _CTX.Pipe()
        self.process = _CTX.Process(target=_child_main, args=(child_end, settings),
                                    name="cronjobs-job", daemon=True)
        self.process.start()
        child_end.close()

    def wait_ready(self) -> "_Child":
        """Block until the child has imported everything and says it is ready."""
        try:
            ready = self.conn.poll(START_TIMEOUT_SECONDS) and self.conn.recv() == _READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            raise RuntimeError(f"job process did not start (exit code {self.process.exitcode})")
        return self

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


class ChildRunner:
    """Runs each job in a child process; kills it after the job's MAX_RUNTIME.

    Args:
        settings: handed to the children, which build their own App from them.
        size: children to start up front (one per worker thread).
    """

    def __init__(self, settings: Settings, size: int) -> None:
        self.settings = settings
        self._idle: list[_Child] = []
        self._busy: dict[int, _Child] = {}
        self._lock = threading.Lock()
        self._cutting_off = False
        # PR_SET_PDEATHSIG fires when the *thread* that started a child ends, so every
        # child is started by this one long-lived thread.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cronjobs-spawner")
        starting = [self._spawn() for _ in range(size)]
        self._idle = [child.wait_ready() for child in starting]

    def _spawn(self) -> _Child:
        return self._spawner.submit(_Child, self.settings).result()

    def _take(self) -> _Child:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._spawn().wait_ready()

    def run(self, job: Job, max_runtime_seconds: float) -> Outcome:
        """Run `job` in a child; the Outcome, or `failed` with a timeout error."""
        child = self._take()
        with self._lock:
            self._busy[job.id] = child
        try:
            child.conn.send(job)
            if child.conn.poll(max_runtime_seconds):
                outcome = child.conn.recv()  # EOFError if the child died
                with self._lock:
                    self._idle.append(child)
                return outcome
            child.kill()
            error = f"timeout after {max_runtime_seconds:g} s (MAX_RUNTIME); job process killed"
            log.warning("job %s: %s", job.id, error, extra={"trace_id": job.id})
            return Outcome("failed", error=error, log=error)
        except (EOFError, OSError) as exc:
            child.kill()
            if self._cutting_off:
                return Outcome("cut_off", log="cut off by worker shutdown; attempt not used")
            error = f"job process died (exit code {child.process.exitcode}): {exc or type(exc).__name__}"
            return Outcome("failed", error=error, log=error)
        finally:
            with self._lock:
                self._busy.pop(job.id, None)

    def cut_off(self) -> list[int]:
        """Kill the children of every running job (shutdown timeout reached); returns
        their job ids. Their `run()` calls return a `cut_off` outcome."""
        self._cutting_off = True
        with self._lock:
            busy = dict(self._busy)
        for child in busy.values():
            child.process.kill()
        return list(busy)

    def close(self) -> None:
        """Stop every idle child (busy ones are ended by `cut_off`)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            try:
                child.conn.send(None)
            except OSError:
                pass
            child.process.join(2)
            child.kill()
        self._spawner.shutdown(wait=False)
