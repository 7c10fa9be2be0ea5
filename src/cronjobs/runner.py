"""Hard MAX_RUNTIME at a low price: jobs run in a pool of job processes forked from a
preloaded fork server.

Dramatiq's TimeLimit only interrupts Python bytecode, so a handler blocked in a system
call or a C loop would never stop in a worker thread. Here a worker thread claims the row,
sends the `Job` to an idle job process over a pipe and waits at most MAX_RUNTIME plus a
short grace for the outcome:

- at MAX_RUNTIME the job process's own alarm (SIGALRM) interrupts the handler, even in a
  blocked system call; it reports `timeout after N s` and exits (`cronjobs.jobprocess`);
- if no outcome comes `KILL_GRACE_SECONDS` later (a C loop that signals cannot reach), the
  worker kills the process with SIGKILL, which always works.

Either way the row is retried or failed with `timeout after N s`, the process is replaced,
and no second copy of the job can start while the first lives (the kill comes first; the
retry is due minutes later). Job processes are forked by multiprocessing's fork server,
which imported the engine and the built-in handlers once (`set_forkserver_preload`), so
their memory pages are shared and a new one starts in milliseconds. The fork server is a
single-threaded process: forking it is safe, unlike forking a threaded worker.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading

from .config import Settings
from .handler import Job
from .outcome import Outcome

log = logging.getLogger("cronjobs.worker")

_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["__main__", "cronjobs.runner", "cronjobs.jobprocess"])
START_TIMEOUT_SECONDS = 60
KILL_GRACE_SECONDS = 2.0  # after MAX_RUNTIME, the alarm's turn before SIGKILL


def _child_main(conn, settings: Settings) -> None:  # noqa: ANN001
    from .jobprocess import serve

    serve(conn, settings)


class _Child:
    """One job process and our end of its pipe."""

    def __init__(self, settings: Settings) -> None:
        self.conn, child_end = _CTX.Pipe()
        self.process = _CTX.Process(target=_child_main, args=(child_end, settings),
                                    name="cronjobs-job", daemon=True)
        self.process.start()
        child_end.close()

    def wait_ready(self) -> "_Child":
        """Block until the process has loaded the handlers and says it is ready."""
        from .jobprocess import READY

        try:
            ready = self.conn.poll(START_TIMEOUT_SECONDS) and self.conn.recv() == READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            raise RuntimeError(f"job process did not start (exit code {self.process.exitcode})")
        return self

    def end(self) -> None:
        """Wait for a process that said it ends (after a timeout); kill it if it lingers."""
        self.process.join(5)
        self.kill()

    def kill(self) -> None:
        """SIGKILL the process (if alive), reap it, close the pipe."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


class ChildRunner:
    """Runs each job in a job process of a pool; stops it at the job's MAX_RUNTIME.

    Args:
        settings: handed to the job processes, which build their own App from them.
        size: job processes started up front (one per worker thread); the pool grows
            on demand if more jobs run at once.
    """

    def __init__(self, settings: Settings, size: int) -> None:
        self.settings = settings
        self._idle: list[_Child] = []
        self._busy: dict[int, _Child] = {}
        self._lock = threading.Lock()
        self._cutting_off = False
        starting = [_Child(settings) for _ in range(size)]
        self._idle = [child.wait_ready() for child in starting]

    def _take(self) -> _Child:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Child(self.settings).wait_ready()

    def run(self, job: Job, max_runtime_seconds: float) -> Outcome:
        """Run `job` in a job process; its Outcome, or `failed` with a timeout error."""
        from .jobprocess import timeout_outcome

        child = self._take()
        with self._lock:
            self._busy[job.id] = child
        try:
            child.conn.send((job, max_runtime_seconds))
            if child.conn.poll(max_runtime_seconds + KILL_GRACE_SECONDS):
                outcome, keep_going = child.conn.recv()  # EOFError if the process died
                if keep_going:
                    with self._lock:
                        self._idle.append(child)
                else:
                    child.end()
                    log.warning("job %s: %s", job.id, outcome.error, extra={"trace_id": job.id})
                return outcome
            child.kill()
            outcome = timeout_outcome(max_runtime_seconds, "job process killed")
            log.warning("job %s: %s", job.id, outcome.error, extra={"trace_id": job.id})
            return outcome
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
        """Kill the processes of every running job (shutdown timeout reached); returns
        their job ids. Their `run()` calls return a `cut_off` outcome."""
        self._cutting_off = True
        with self._lock:
            busy = dict(self._busy)
        for child in busy.values():
            child.process.kill()
        return list(busy)

    def close(self) -> None:
        """Stop every idle job process (busy ones are ended by `cut_off`)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            try:
                child.conn.send(None)
            except OSError:
                pass
        for child in idle:
            child.process.join(2)
            child.kill()
