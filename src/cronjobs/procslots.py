"""A worker's job processes: one job at a time each, started, fed, read, timed and replaced.

Each slot is a `runner.JobProcess` forked from the preloaded fork server. This module
sends a job to an idle process, reads what comes back over its pipe (the ready signal,
the job's outcome), kills a process silent past MAX_RUNTIME + grace (SIGKILL; the row gets
a `timeout` outcome) or whose job an operator stopped (`stopped`), and replaces a process
that ended. Every way a job ends here becomes an outcome of `cronjobs.outcome`, handed to
the `report` callback; the loop that owns these slots (`pool.SlotPool`) decides when to
wait and what to send.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

from .config import Settings
from .context import Runtime
from .handler import Job
from .outcome import (
    Outcome,
    cut_off_by_recycle,
    cut_off_by_shutdown,
    not_started,
    process_died,
    timeout,
    unreadable,
    unreadable_answer,
    wrong_answer,
)
from .runner import KILL_GRACE_SECONDS, READY, START_TIMEOUT_SECONDS, JobProcess
from .status import Reason

log = logging.getLogger("cronjobs.worker")

Report = Callable[[Job, Outcome, float], None]  # (job, outcome, duration in ms)


class ProcessSlots:
    """`count` job processes and what happens to them. Used by one thread only (the
    pool's loop), except `busy_count`, `running_ids` and `cut_off`, which read or kill.

    Args:
        settings: the worker's settings (see `runner.JobProcess`).
        runtime: handed to every job's `JobContext` (the serve URL).
        count: job processes kept (the worker's slots).
        report: called with `(job, outcome, duration_ms)` when a job ended here.
        stopping: set when the worker stops: a process that ends is not replaced.
    """

    def __init__(self, settings: Settings, runtime: Runtime, count: int, *,
                 report: Report, stopping: threading.Event) -> None:
        self._settings = settings
        self._runtime = runtime
        self._count = count
        self._report = report
        self._stopping = stopping
        self.procs: list[JobProcess] = []
        self._cut_reason: str | None = None
        self._cutting_off = False

    def start(self) -> None:
        """Start the job processes and wait until each has loaded the handlers.

        Raises:
            RuntimeError: a process did not say it was ready within 60 s.
        """
        self.procs = [self._new() for _ in range(self._count)]
        for proc in self.procs:
            self._await_ready(proc)

    def idle(self) -> int:
        """Processes ready for a job."""
        return sum(1 for p in self.procs if p.state == "idle")

    def busy_count(self) -> int:
        """Processes running a job."""
        return sum(1 for p in list(self.procs) if p.state == "busy")

    def running_ids(self) -> list[int]:
        """Ids of the rows running in job processes."""
        return [p.job.id for p in list(self.procs) if p.state == "busy" and p.job is not None]

    def send(self, job: Job, max_runtime_seconds: float) -> None:
        """Send `job` to an idle process (there must be one). A process that had died
        while idle puts the row back without using an attempt (`not_started`); a job that
        cannot be sent (pickle) fails alone (`unreadable`)."""
        proc = next(p for p in self.procs if p.state == "idle")
        try:
            proc.start(job, max_runtime_seconds)
        except OSError as exc:  # the process had died while idle: the job never started
            log.warning("job %s: its job process had died while idle (%s); row back to "
                        "pending, attempt not used", job.id, exc, extra={"trace_id": job.id})
            self._ended(proc, not_started(f"job process had died before the job was sent "
                                          f"({exc})"))
        except Exception as exc:  # the job cannot be pickled: nothing reached the pipe
            log.error("job %s could not be sent to its job process (%s: %.300s); failed",
                      job.id, type(exc).__name__, exc, extra={"trace_id": job.id})
            proc.state, proc.job = "idle", None
            self._report(job, unreadable(exc), 0.0)

    def conns(self) -> list[Connection]:
        """The pipes to wait on: processes starting or running a job."""
        return [p.conn for p in self._waiting()]

    def next_deadline(self) -> float | None:
        """The earliest `time.monotonic()` by which a waited-on process must answer."""
        return min((p.deadline for p in self._waiting()), default=None)

    def serve(self, ready: list) -> None:
        """Read the processes whose pipes are in `ready` (from `multiprocessing.connection
        .wait` over `conns()`), then handle those past their deadline."""
        waiting = self._waiting()
        by_conn = {p.conn: p for p in waiting}
        for conn in ready:
            if conn in by_conn:
                self._read(by_conn[conn])
        now = time.monotonic()
        for proc in waiting:
            if proc.state in ("busy", "starting") and now > proc.deadline:
                self._overdue(proc)

    def cut_off(self, recycle_reason: str | None = None) -> list[int]:
        """Kill the process of every running job and return the jobs' ids. Their outcomes
        are reported when the loop reads the closed pipes: `cut_off_by_recycle` with
        `recycle_reason` (attempt used), else `cut_off_by_shutdown` (attempt given back)."""
        self._cut_reason = recycle_reason
        self._cutting_off = True
        busy = [p for p in list(self.procs) if p.state == "busy"]
        for proc in busy:
            if proc.process.is_alive():
                proc.process.kill()
        return [p.job.id for p in busy if p.job is not None]

    def stop(self, job_id: int, result: Outcome) -> bool:
        """Kill the process running job `job_id` (an operator's Stop), as MAX_RUNTIME
        does: `result` is reported and a new process takes the slot. Called by the loop's
        thread. Returns False when no process runs it, or when it has answered already
        (its own outcome stands)."""
        for proc in list(self.procs):
            if proc.state == "busy" and proc.job is not None and proc.job.id == job_id:
                if proc.conn.poll():  # its answer is waiting: read it, nothing to stop
                    self._read(proc)
                    return False
                self._ended(proc, result)
                return True
        return False

    def close(self) -> None:
        """Ask idle processes to end, then kill whatever is left."""
        for proc in self.procs:
            if proc.state == "idle":
                proc.stop()
        for proc in self.procs:
            proc.process.join(2)
            proc.kill()
        self.procs = []

    # -- inside ---------------------------------------------------------------------------
    def _waiting(self) -> list[JobProcess]:
        return [p for p in self.procs if p.state in ("busy", "starting")]

    def _await_ready(self, proc: JobProcess) -> None:
        try:
            ready = proc.conn.poll(START_TIMEOUT_SECONDS) and proc.read() == READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            proc.kill()
            raise RuntimeError(f"job process did not start (exit code {proc.process.exitcode})")
        proc.state = "idle"

    def _read(self, proc: JobProcess) -> None:
        try:
            message = proc.read()
        except (EOFError, OSError) as exc:
            self._closed(proc, exc)
            return
        except Exception as exc:  # an answer that cannot be unpickled: trust the process no more
            result = unreadable_answer(exc)
            log.error("%s; process replaced", result.error)
            if proc.state == "starting" or proc.job is None:
                self._replace(proc, result.error)
            else:
                self._ended(proc, result)
            return
        if message == READY:
            proc.state = "idle"
            return
        self._answer(proc, *message)

    def _closed(self, proc: JobProcess, exc: BaseException) -> None:
        """The pipe closed: the process ended (or was killed by `cut_off`)."""
        if proc.state == "starting":
            self._replace(proc, f"job process did not start (exit code {proc.process.exitcode})")
            return
        if self._cutting_off and self._cut_reason:
            result = cut_off_by_recycle(self._cut_reason)
        elif self._cutting_off:
            result = cut_off_by_shutdown()
        else:
            proc.process.join(0.5)  # reap it, so that its exit code is known
            result = process_died(proc.process.exitcode, str(exc))
        self._ended(proc, result)

    def _answer(self, proc: JobProcess, job_id: int, result: Outcome, keep_going: bool) -> None:
        job, duration_ms = proc.job, (time.monotonic() - proc.started_at) * 1000
        if job is None or job_id != job.id:  # an answer nobody asked for: trust nothing
            if job is None:
                error = f"job process answered for job {job_id} while running job none"
                log.error("%s; process replaced", error)
                self._replace(proc, error)
            else:
                result = wrong_answer(job_id, job.id)
                log.error("%s; process replaced", result.error)
                self._ended(proc, result)
            return
        if keep_going:
            proc.state, proc.job = "idle", None
            self._report(job, result, duration_ms)
        else:  # the process stopped the job at MAX_RUNTIME and ends
            log.warning("job %s: %s", job.id, result.error, extra={"trace_id": job.id})
            proc.end()
            self._report(job, result, duration_ms)
            self._respawn(proc)

    def _overdue(self, proc: JobProcess) -> None:
        if proc.state == "starting":
            self._replace(proc, f"job process did not start within {START_TIMEOUT_SECONDS} s")
            return
        result = timeout(proc.max_runtime, Reason.TIMEOUT_KILLED)
        log.warning("job %s: %s (no answer %g s after MAX_RUNTIME)", proc.job.id, result.error,
                    KILL_GRACE_SECONDS, extra={"trace_id": proc.job.id})
        self._ended(proc, result)

    def _ended(self, proc: JobProcess, result: Outcome) -> None:
        """The job of `proc` ended with `result` and so did the process: replace it."""
        job = proc.job
        proc.kill()
        self._report(job, result, (time.monotonic() - proc.started_at) * 1000)
        self._respawn(proc)

    def _respawn(self, proc: JobProcess) -> None:
        self.procs.remove(proc)
        if not self._stopping.is_set() and not self._cutting_off:
            self.procs.append(self._new())

    def _replace(self, proc: JobProcess, why: str) -> None:
        log.error("%s; starting another in 1 s", why)
        proc.kill()
        self.procs.remove(proc)
        if not self._stopping.is_set():
            self._stopping.wait(1.0)
            self.procs.append(self._new())

    def _new(self) -> JobProcess:
        return JobProcess(self._settings, self._runtime)
