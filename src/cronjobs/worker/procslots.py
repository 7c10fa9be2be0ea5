"""A worker's job processes: one job at a time each, started on demand, fed, read, timed,
retired when idle.

Each slot is a `runner.JobProcess` forked from the preloaded fork server, started when a
claimed row needs one and no process is idle: the job goes down the new process's pipe at
once and runs as soon as the process has loaded the handlers (its MAX_RUNTIME is counted
from the process's ready signal). This module sends a job to an idle process (the one used
last, so the others can retire), reads what comes back over its pipe (the ready signal,
the job's outcome), kills a process silent past MAX_RUNTIME + grace (SIGKILL; the row gets
a `timeout` outcome, as it does for a process found gone by its own kill timer when this
worker was frozen past that deadline) or whose job an operator stopped (`stopped`), ends
a process idle for `job_process_idle_seconds`, and stops the fork server once no job
process has lived for as long: an idle worker is its own process alone. A process that
ended is not replaced until a row needs it; the first one after the fork server stopped
starts it again. Every way a job ends here becomes an outcome of `cronjobs.job.outcome`,
handed to the `report` callback; the loop that owns these slots (`pool.SlotPool`) decides
when to wait and what to send.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait

from ..config import Settings
from ..handler import Job
from ..job.context import Runtime
from ..job.outcome import (
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
from ..status import Reason
from .runner import (
    KILL_GRACE_SECONDS,
    NOT_READY,
    READY,
    START_TIMEOUT_SECONDS,
    JobProcess,
    start_fork_server,
    stop_fork_server,
)

log = logging.getLogger("cronjobs.worker.loop")

Report = Callable[[Job, Outcome, float], None]  # (job, outcome, duration in ms)


class ProcessSlots:
    """Up to `count` job processes and what happens to them. Used by one thread only (the
    pool's loop), except `busy_count`, `running_ids` and `cut_off`, which read or kill.

    Args:
        settings: the worker's settings (see `runner.JobProcess`); its
            `job_process_idle_seconds` is how long a process may sit idle before it ends.
        runtime: handed to every job's `JobContext` (the serve URL).
        count: job processes at most (the worker's slots).
        report: called with `(job, outcome, duration_ms)` when a job ended here.
        stopping: set when the worker stops: no process is started any more.
    """

    def __init__(self, settings: Settings, runtime: Runtime, count: int, *,
                 report: Report, stopping: threading.Event) -> None:
        self._settings = settings
        self._runtime = runtime
        self._count = count
        self._report = report
        self._stopping = stopping
        self.procs: list[JobProcess] = []
        self._idle_seconds = settings.job_process_idle_seconds
        self._cut_reason: str | None = None
        self._cutting_off = False
        self._no_start_before = 0.0  # after a process failed to start: a pause
        self._empty_since: float | None = None  # no job process since (time.monotonic())
        self._server_may_run = False  # the fork server was started and not stopped since
        self.start_problem: str | None = None  # why job processes fail to start, until one does

    def start(self) -> None:
        """Start the fork server (in the background: it loads the handlers while the first
        rows are claimed); job processes start when rows need them."""
        start_fork_server()
        self._server_may_run = True

    def idle(self) -> int:
        """Jobs that can be sent now: idle processes, plus processes that may still be
        started (none while the worker stops or just after a process failed to start)."""
        idle = sum(1 for p in self.procs if p.state == "idle")
        if self._stopping.is_set() or time.monotonic() < self._no_start_before:
            return idle
        return idle + self._count - len(self.procs)

    def busy_count(self) -> int:
        """Processes running a job."""
        return sum(1 for p in list(self.procs) if p.state == "busy")

    def running_ids(self) -> list[int]:
        """Ids of the rows running in job processes."""
        return [p.job.id for p in list(self.procs) if p.state == "busy" and p.job is not None]

    def send(self, job: Job, max_runtime_seconds: float) -> None:
        """Send `job` to the idle process used last, or to a new process when none is idle
        (`idle()` must be > 0). A process that had died while idle, or that cannot be
        started, puts the row back without using an attempt (`not_started`); a job that
        cannot be sent (pickle) fails alone (`unreadable`). After starting a process, what
        the busy processes have sent meanwhile is read (`_read_ready`)."""
        idle = [p for p in self.procs if p.state == "idle"]
        started = False
        if idle:
            proc = max(idle, key=lambda p: p.idle_since)
        else:
            try:
                proc = self._new()
            except Exception as exc:  # the fork server could not fork: nothing started
                self._start_failed(f"job process could not be started ({exc})")
                self._report(job, not_started(f"job process could not be started ({exc})"),
                             0.0)
                return
            self.procs.append(proc)
            started = True
        try:
            proc.start(job, max_runtime_seconds)
        except OSError as exc:  # the process had died while idle: the job never started
            log.warning("job %s: its job process had died while idle (%s); row back to "
                        "pending, attempt not used", job.id, exc, extra={"trace_id": job.id})
            self._ended(proc, not_started(f"job process had died before the job was sent "
                                          f"({exc})"))
            return
        except Exception as exc:  # the job cannot be pickled: nothing reached the pipe
            log.error("job %s could not be sent to its job process (%s: %.300s); failed",
                      job.id, type(exc).__name__, exc, extra={"trace_id": job.id})
            proc.state, proc.job = "idle", None
            proc.idle_since = time.monotonic()
            self._report(job, unreadable(exc), 0.0)
            return
        if self._cutting_off:  # the worker cut its jobs off while this process started
            proc.process.kill()
        elif started:
            self._read_ready()

    def _read_ready(self) -> None:
        """Read, without waiting, what the busy processes have sent: the loop starts the
        processes of a claim one after another (each start waits for the fork server's
        fork, milliseconds), and the first jobs end meanwhile: their outcomes are
        reported now, not after the last start."""
        by_conn = {p.conn: p for p in self._waiting()}
        for conn in wait(list(by_conn), 0):
            self._read(by_conn[conn])

    def conns(self) -> list[Connection]:
        """The pipes to wait on: processes with a job (starting it or running it)."""
        return [p.conn for p in self._waiting()]

    def next_deadline(self) -> float | None:
        """The earliest `time.monotonic()` by which `serve` has something to do: a
        waited-on process must answer, an idle process or the fork server is due to end."""
        due = [p.deadline for p in self._waiting()]
        due += [p.idle_since + self._idle_seconds for p in self.procs if p.state == "idle"]
        if self._server_may_run and self._empty_since is not None:
            due.append(self._empty_since + self._idle_seconds)
        return min(due, default=None)

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
            if proc.state == "busy" and now > proc.deadline:
                self._overdue(proc)
        self._retire_idle(now)

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
        return [p for p in self.procs if p.state == "busy"]

    def _retire_idle(self, now: float) -> None:
        """End the processes idle for `job_process_idle_seconds` (they have no job), and
        the fork server once no job process has lived for that long."""
        for proc in [p for p in self.procs if p.state == "idle"
                     and now - p.idle_since >= self._idle_seconds]:
            proc.stop()
            proc.end(1.0)
            self.procs.remove(proc)
            log.debug("job process %s retired after %g s idle", proc.process.pid,
                      self._idle_seconds)
        if self.procs:
            self._empty_since = None
        elif self._empty_since is None:
            self._empty_since = now
        elif self._server_may_run and now - self._empty_since >= self._idle_seconds:
            self._server_may_run = False
            if stop_fork_server():
                log.debug("fork server stopped: no job process for %g s", self._idle_seconds)

    def _start_failed(self, why: str) -> None:
        """A process could not start: no new one for a second (the rows wait). Logged
        once while the reason stays the same (`start_problem`, cleared when one starts)."""
        if why != self.start_problem:
            log.error("%s; no job process started for 1 s (said once, until one starts)", why)
        self.start_problem = why
        self._no_start_before = time.monotonic() + 1.0

    def _read(self, proc: JobProcess) -> None:
        try:
            message = proc.read()
        except (EOFError, OSError) as exc:
            self._closed(proc, exc)
            return
        except Exception as exc:  # an answer that cannot be unpickled: trust the process no more
            result = unreadable_answer(exc)
            log.error("%s; process replaced", result.error)
            if not proc.ready:
                self._never_started(proc, result.error)
            else:
                self._ended(proc, result)
            return
        if isinstance(message, str) and message.startswith(NOT_READY):  # it ends: the why
            self._never_started(proc, f"job process did not start "
                                      f"({message.removeprefix(NOT_READY)})")
            return
        if message == READY:
            proc.begin()  # the job sent with the start runs from now: its MAX_RUNTIME too
            if self.start_problem is not None:
                log.warning("job processes start again (after: %s)", self.start_problem)
                self.start_problem = None
            return
        self._answer(proc, *message)

    def _never_started(self, proc: JobProcess, why: str) -> None:
        """`proc` ended (or is given up) before it was ready: its job never started."""
        self._start_failed(why)
        self._ended(proc, not_started(why))

    def _closed(self, proc: JobProcess, exc: BaseException) -> None:
        """The pipe closed: the process ended (or was killed by `cut_off`)."""
        if not proc.ready and not self._cutting_off:
            proc.process.join(0.5)
            self._never_started(proc, f"job process did not start (exit code "
                                      f"{proc.process.exitcode})")
            return
        if self._cutting_off and self._cut_reason:
            result = cut_off_by_recycle(self._cut_reason)
        elif self._cutting_off:
            result = cut_off_by_shutdown()
        else:
            proc.process.join(0.5)  # reap it, so that its exit code is known
            if proc.ended_by_own_deadline():  # its worker (this one) was frozen, or late
                result = timeout(proc.max_runtime, Reason.TIMEOUT_KILLED)
                log.warning("job %s: %s (its job process ended itself %g s after "
                            "MAX_RUNTIME)", proc.job.id, result.error, KILL_GRACE_SECONDS,
                            extra={"trace_id": proc.job.id})
            else:
                result = process_died(proc.process.exitcode, str(exc))
        self._ended(proc, result)

    def _answer(self, proc: JobProcess, job_id: int, result: Outcome, keep_going: bool) -> None:
        job, duration_ms = proc.job, (time.monotonic() - proc.started_at) * 1000
        if job is None or job_id != job.id:  # an answer nobody asked for: trust nothing
            if job is None:  # cannot happen: only busy processes are read
                log.error("job process answered for job %s while running job none; process "
                          "ended", job_id)
                proc.kill()
                self._leave(proc)
            else:
                result = wrong_answer(job_id, job.id)
                log.error("%s; process replaced", result.error)
                self._ended(proc, result)
            return
        if keep_going:
            proc.state, proc.job = "idle", None
            proc.idle_since = time.monotonic()
            self._report(job, result, duration_ms)
        else:  # the process stopped the job at MAX_RUNTIME and ends
            log.warning("job %s: %s", job.id, result.error, extra={"trace_id": job.id})
            proc.end()
            self._report(job, result, duration_ms)
            self._leave(proc)

    def _overdue(self, proc: JobProcess) -> None:
        if not proc.ready:
            proc.kill()
            self._never_started(proc, f"job process did not start within "
                                      f"{START_TIMEOUT_SECONDS} s")
            return
        result = timeout(proc.max_runtime, Reason.TIMEOUT_KILLED)
        log.warning("job %s: %s (no answer %g s after MAX_RUNTIME)", proc.job.id, result.error,
                    KILL_GRACE_SECONDS, extra={"trace_id": proc.job.id})
        self._ended(proc, result)

    def _ended(self, proc: JobProcess, result: Outcome) -> None:
        """The job of `proc` ended with `result` and so did the process: it leaves its
        slot (the next row that needs a process starts a new one)."""
        job = proc.job
        proc.kill()
        self._report(job, result, (time.monotonic() - proc.started_at) * 1000)
        self._leave(proc)

    def _leave(self, proc: JobProcess) -> None:
        """`proc` has ended: out of its slot, and no longer `busy` (`serve` may still
        hold it in its list of processes to check for their deadlines)."""
        proc.state = "ended"
        self.procs.remove(proc)

    def _new(self) -> JobProcess:
        self._server_may_run = True
        return JobProcess(self._settings, self._runtime)
