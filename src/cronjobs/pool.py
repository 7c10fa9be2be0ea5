"""A worker process's slots: one loop thread keeps `slots` jobs running in job processes.

Broker messages are doorbells: a message for queue `q` means "`q` may have due rows". The
Dramatiq actor only rings (`ring(q)`). The loop does the rest, in one thread, so a job
costs no thread hand-offs:

1. write the outcomes that came in since the last turn and claim the best due rows of the
   rung queues for the idle slots — all in **one transaction** (group commit: several
   outcomes, one claim statement for several rows, one commit);
2. send each claimed row to an idle job process (or a thread, for handlers that say
   `ISOLATION = "thread"`);
3. wait until an outcome, a doorbell or a deadline comes (`multiprocessing.connection.wait`
   over the job processes' pipes): a job process silent past MAX_RUNTIME + grace is killed
   (SIGKILL) and its row gets a timeout outcome; a process that ended is replaced.

So priority order holds (the best rows are claimed first, whatever order the messages came
in), a duplicated or stray message costs nothing, a worker never holds rows it has no
slot for, and several worker processes share a queue by their free slots. With a backlog
the loop waits a few milliseconds for half the slots to come free, so each transaction
serves several jobs.
"""

from __future__ import annotations

import logging
import os
import queue as queues
import threading
import time
from multiprocessing.connection import wait

from .db import classify, retry_while_unavailable, run_in_transaction
from .errors import DatabaseUnavailable
from .executor import Executor, Finish, call_handler, job_of, write_all
from .handler import Job
from .outcome import Outcome, timeout_outcome, unreadable
from .runner import KILL_GRACE_SECONDS, READY, START_TIMEOUT_SECONDS, JobProcess

log = logging.getLogger("cronjobs.worker")

BATCH_WINDOW_SECONDS = 0.005  # with a backlog, wait this long at most for a bigger batch
IDLE_WAKE_SECONDS = 1.0


class SlotPool:
    """`slots` job slots and the loop that keeps them busy.

    Args:
        executor: plans and reports outcomes, tracks leases; its `runtime` reaches the
            job processes.
        slots: jobs that run at the same time.
        processes: run jobs in job processes (the hard MAX_RUNTIME stop); False runs
            every job in a thread (tests, debugging).
        claim_limit: claim no more rows than this in all (`--max-jobs`); None: no limit.
        accepting: rows are claimed only while this event is set (the worker clears it
            when it recycles or stops); default: always.
        stopped: set when the worker has stopped: waits for the database end.
    """

    def __init__(self, executor: Executor, slots: int, *, processes: bool = True,
                 claim_limit: int | None = None, accepting: threading.Event | None = None,
                 stopped: threading.Event | None = None) -> None:
        self.executor = executor
        self.app = executor.app
        self.slots = slots
        self.processes = processes
        self.claim_limit = claim_limit
        if accepting is None:
            accepting = threading.Event()
            accepting.set()
        self._accepting = accepting
        self._stopped = stopped or threading.Event()
        self.claimed_total = 0
        self.claims = 0  # claim statements (for tests and benchmarks)
        self.commits = 0  # transactions that wrote outcomes and/or claimed
        self._procs: list[JobProcess] = []
        self._thread_jobs: dict[int, tuple[float, float, Job]] = {}  # id -> (start, limit, job)
        self._thread_outcomes: queues.SimpleQueue = queues.SimpleQueue()
        self._abandoned: set[int] = set()  # thread jobs given up at MAX_RUNTIME (loop only)
        self._plans: list[Finish] = []  # outcomes not written yet
        self._plans_since = 0.0
        self._lock = threading.Lock()  # guards _rung and _thread_jobs
        self._rung: dict[str, None] = {}
        self._backlog = False
        self._min_batch = max(1, slots // 2)
        self._stopping = threading.Event()
        self.failed = threading.Event()  # the loop itself broke: the worker must exit non-zero
        self._cutting_off = False
        self._cut_reason: str | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._loop_thread = threading.Thread(target=self._loop, name="cronjobs-pool", daemon=True)

    # -- outside the loop ----------------------------------------------------------------
    def start(self) -> None:
        """Start the job processes (waiting until each has loaded the handlers) and the loop."""
        if self.processes:
            self._procs = [self._new_process() for _ in range(self.slots)]
            for proc in self._procs:
                self._await_ready(proc)
        self._loop_thread.start()

    def ring(self, queue: str) -> None:
        """Say that `queue` may have due rows (a broker message, the sweep, a retry)."""
        with self._lock:
            new = queue not in self._rung
            self._rung[queue] = None
        if new:
            self._wake()

    def busy(self) -> int:
        """Jobs running now."""
        with self._lock:
            threads = len(self._thread_jobs)
        return threads + sum(1 for p in self._procs if p.state == "busy")

    def running_ids(self) -> list[int]:
        """Ids of the rows running now."""
        with self._lock:
            ids = list(self._thread_jobs)
        return ids + [p.job.id for p in self._procs if p.state == "busy" and p.job is not None]

    def abandon_overdue(self, grace_seconds: float) -> list[Job]:
        """Give up the jobs of `ISOLATION = "thread"` handlers running past MAX_RUNTIME +
        grace: no signal can stop a thread, so their rows get a timeout outcome now
        (retried after backoff, or failed) and the caller recycles the worker, so the
        threads end with the process. Returns those jobs."""
        now = time.monotonic()
        with self._lock:
            overdue = [(job, started, limit) for started, limit, job in self._thread_jobs.values()
                       if now - started > limit + grace_seconds]
            for job, _, _ in overdue:
                del self._thread_jobs[job.id]
        for job, started, limit in overdue:
            outcome = timeout_outcome(limit, "thread job abandoned, worker recycling")
            self._thread_outcomes.put((job, outcome, (now - started) * 1000, True))
        if overdue:
            self._wake()
        return [job for job, _, _ in overdue]

    def stop(self) -> None:
        """Claim nothing more; the loop ends once every running job has ended."""
        self._stopping.set()
        self._wake()

    def cut_off(self, recycle_reason: str | None = None) -> list[int]:
        """Kill the job processes of every running job (shutdown timeout reached) and
        return their ids. Stopped by a signal (a deploy), their rows go back to `pending`
        without using an attempt. Stopped because the worker recycles (`recycle_reason`,
        e.g. its memory limit), the cut-off uses the attempt: the job may be the cause, and
        one that always outlives the limit must end `failed`, not loop."""
        self._cut_reason = recycle_reason
        self._cutting_off = True
        busy = [p for p in self._procs if p.state == "busy"]
        for proc in busy:
            if proc.process.is_alive():
                proc.process.kill()
        self._wake()
        return [p.job.id for p in busy if p.job is not None]

    def join(self, timeout_seconds: float) -> bool:
        """Wait up to `timeout_seconds` for the loop to end; True when it did."""
        self._loop_thread.join(timeout_seconds)
        return not self._loop_thread.is_alive()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):  # already awake (pipe full) or closed
            pass

    def _await_ready(self, proc: JobProcess) -> None:
        try:
            ready = proc.conn.poll(START_TIMEOUT_SECONDS) and proc.read() == READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            proc.kill()
            raise RuntimeError(f"job process did not start (exit code {proc.process.exitcode})")
        proc.state = "idle"

    # -- the loop ------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                self._collect_thread_outcomes()
                if self._stopping.is_set() and not self.busy() and not self._plans:
                    return
                if not self._holding_for_batch():
                    for row in self._cycle():
                        self._dispatch(row)
                self._wait()
        except Exception:  # never die silently: the worker would hang with its slots
            # Rows are guarded one by one (`_dispatch`, `_read`, `_one_by_one`), so this is
            # the loop itself (a claim the database refuses, a bug): the process must exit
            # non-zero so that its supervisor starts a new one, never stay up looking alive.
            log.exception("the worker's job loop failed; the worker exits with status 1")
            self._stopping.set()
            self.failed.set()
        finally:
            self._close()

    def _free(self) -> int:
        if self.processes:
            idle = sum(1 for p in self._procs if p.state == "idle")
            return min(idle, self.slots - self.busy())
        return self.slots - self.busy()

    def _holding_for_batch(self) -> bool:
        """With a backlog and few free slots, wait a little for more to come free."""
        if not self._backlog or self._stopping.is_set() or self._free() >= self._min_batch:
            return False
        return bool(self._plans) and time.monotonic() - self._plans_since < BATCH_WINDOW_SECONDS

    def _wants(self) -> list[tuple[str, int]]:
        """`(queue, rows)` to claim now: the idle slots, rung queue by rung queue."""
        if self._stopping.is_set() or not self._accepting.is_set():
            return []
        free = self._free()
        if self.claim_limit is not None:
            free = min(free, self.claim_limit - self.claimed_total)
        with self._lock:
            rung = list(self._rung)
        return [(q, free) for q in rung] if free > 0 else []

    def _cycle(self) -> list[dict]:
        """Write the pending outcomes and claim rows for the idle slots, in one
        transaction; returns the claimed rows."""
        plans, wants = self._plans, self._wants()
        if not plans and not wants:
            return []
        self._plans = []
        try:
            finals, rows, drained = retry_while_unavailable(
                lambda: run_in_transaction(self.app.engine,
                                           lambda conn: self._transaction(conn, plans, wants)),
                "writing outcomes and claiming jobs", give_up_seconds=None,
                stop=self._stopped)
        except DatabaseUnavailable:  # stopping while the database is down
            log.error("%d outcome(s) not written (database unavailable while stopping); "
                      "their leases will expire and recover-stale takes them back", len(plans))
            return []
        except Exception as exc:
            if classify(exc) == "transient":  # deadlocks that persisted: try again soon
                log.error("writing outcomes and claiming jobs failed (%s: %.300s); trying "
                          "again in 1 s", type(exc).__name__, exc)
                self._plans = plans + self._plans
                self._stopped.wait(1.0)
                return []
            finals, rows, drained = self._apart(plans, wants)
        self.commits += 1
        for plan, final in zip(plans, finals, strict=True):
            self.executor.done(plan, final)
        self.claimed_total += len(rows)
        with self._lock:
            for queue in drained:
                self._rung.pop(queue, None)
        self._backlog = bool(wants) and not drained
        return rows

    def _transaction(self, conn, plans: list[Finish],
                     wants: list[tuple[str, int]]) -> tuple[list[str], list[dict], set[str]]:
        finals = write_all(conn, plans)
        rows: list[dict] = []
        drained: set[str] = set()
        now = self.app.clock.now()
        free = wants[0][1] if wants else 0
        for queue, _ in wants:
            wanted = free - len(rows)
            if wanted <= 0:
                break
            got = self.executor.claim_rows(conn, now, queue=queue, limit=wanted)
            self.claims += 1
            rows += got
            if len(got) < wanted:
                drained.add(queue)
        return finals, rows, drained

    def _apart(self, plans: list[Finish], wants: list[tuple[str, int]]
               ) -> tuple[list[str], list[dict], set[str]]:
        """The transaction was refused, or broke on something that is not a database
        error: write each outcome alone (only the one it is about becomes `fatal`), then
        claim alone. A claim that fails alone is the loop's own failure: it raises."""
        finals = self._one_by_one(plans)
        try:
            rows, drained = retry_while_unavailable(
                lambda: run_in_transaction(self.app.engine,
                                           lambda conn: self._transaction(conn, [], wants)[1:]),
                "claiming jobs", give_up_seconds=None, stop=self._stopped)
        except DatabaseUnavailable:  # stopping while the database is down
            return finals, [], set()
        return finals, rows, drained

    def _one_by_one(self, plans: list[Finish]) -> list[str]:
        """A batch the database refused: write each outcome alone, so only the one it
        refuses becomes `fatal`."""
        finals = []
        for plan in plans:
            try:
                final = run_in_transaction(self.app.engine, plan.write)
            except Exception as exc:
                plan = self.executor.refused(plan, exc)
                final = run_in_transaction(self.app.engine, plan.write)
            finals.append(final)
        return finals

    def _dispatch(self, row: dict) -> None:
        """Start the claimed `row` in a job process or a thread. Nothing in one row can
        stop the loop: a row that cannot be prepared or sent fails alone (`unreadable`)."""
        job, instant = job_of(row)
        if instant is None:
            instant = self.executor.prepare(job)
        if instant is not None:
            self._add_plan(job, instant, 0.0)
            return
        self.executor.track(job)
        max_runtime = float(self.app.resolve(job.type).MAX_RUNTIME)
        if not self.processes or self.executor.in_thread(job):
            with self._lock:
                self._thread_jobs[job.id] = (time.monotonic(), max_runtime, job)
            # A daemon thread per job: one abandoned at MAX_RUNTIME must not keep the
            # process from exiting (a pool's threads are joined at exit).
            threading.Thread(target=self._run_in_thread, args=(job,), daemon=True,
                             name=f"cronjobs-job-{job.id}").start()
            return
        proc = next(p for p in self._procs if p.state == "idle")
        try:
            proc.start(job, max_runtime)
        except OSError as exc:  # the process had died while idle: the job never started
            log.warning("job %s: its job process had died while idle (%s); row back to "
                        "pending, attempt not used", job.id, exc, extra={"trace_id": job.id})
            self._ended(proc, Outcome("cut_off", log=f"job process had died before the job "
                                                      f"was sent ({exc}); attempt not used"))
        except Exception as exc:  # the job cannot be pickled: nothing reached the pipe
            log.error("job %s could not be sent to its job process (%s: %.300s); failed",
                      job.id, type(exc).__name__, exc, extra={"trace_id": job.id})
            proc.state, proc.job = "idle", None
            self._add_plan(job, unreadable(exc), 0.0)

    def _run_in_thread(self, job: Job) -> None:
        started = time.monotonic()
        outcome = call_handler(self.app, job, self.executor.runtime)
        self._thread_outcomes.put((job, outcome, (time.monotonic() - started) * 1000, False))
        self._wake()

    def _collect_thread_outcomes(self) -> None:
        while True:
            try:
                job, outcome, duration_ms, abandoned = self._thread_outcomes.get_nowait()
            except queues.Empty:
                return
            if abandoned:
                self._abandoned.add(job.id)
            elif job.id in self._abandoned:  # it came back after all: its row moved on
                self._abandoned.discard(job.id)
                continue
            with self._lock:
                self._thread_jobs.pop(job.id, None)
            self._add_plan(job, outcome, duration_ms)

    def _add_plan(self, job: Job, outcome: Outcome, duration_ms: float) -> None:
        self.executor.untrack(job.id)
        if not self._plans:
            self._plans_since = time.monotonic()
        self._plans.append(self.executor.plan(job, outcome, duration_ms))

    def _wait(self) -> None:
        now = time.monotonic()
        waiting = [p for p in self._procs if p.state in ("busy", "starting")]
        timeout = IDLE_WAKE_SECONDS
        if waiting:
            timeout = max(0.0, min(timeout, min(p.deadline for p in waiting) - now))
        if self._plans:
            timeout = min(timeout, max(0.0, self._plans_since + BATCH_WINDOW_SECONDS - now))
        ready = wait([p.conn for p in waiting] + [self._wake_r], timeout)
        if self._wake_r in ready:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
        by_conn = {p.conn: p for p in waiting}
        for conn in ready:
            if conn in by_conn:
                self._read(by_conn[conn])
        now = time.monotonic()
        for proc in waiting:
            if proc.state in ("busy", "starting") and now > proc.deadline:
                self._overdue(proc)

    def _read(self, proc: JobProcess) -> None:
        try:
            message = proc.read()
        except (EOFError, OSError) as exc:
            if proc.state == "starting":
                self._replace(proc, f"job process did not start (exit code "
                                    f"{proc.process.exitcode})")
                return
            if self._cutting_off and self._cut_reason:
                error = f"cut off when the worker recycled ({self._cut_reason}); attempt used"
                outcome = Outcome("failed", error=error, log=error)
            elif self._cutting_off:
                outcome = Outcome("cut_off", log="cut off by worker shutdown; attempt not used")
            else:
                proc.process.join(0.5)  # reap it, so that its exit code is known
                error = (f"job process died (exit code {proc.process.exitcode})"
                         + (f": {exc}" if str(exc) else ""))
                outcome = Outcome("failed", error=error, log=error)
            self._ended(proc, outcome)
            return
        except Exception as exc:  # an answer that cannot be unpickled: trust the process no more
            error = (f"the job process's answer could not be read ({type(exc).__name__}: "
                     f"{str(exc)[:300]})")
            log.error("%s; process replaced", error)
            if proc.state == "starting" or proc.job is None:
                self._replace(proc, error)
            else:
                self._ended(proc, Outcome("fatal", error=error, log=error))
            return
        if message == READY:
            proc.state = "idle"
            return
        job_id, outcome, keep_going = message
        job, duration_ms = proc.job, (time.monotonic() - proc.started_at) * 1000
        if job is None or job_id != job.id:  # an answer nobody asked for: trust nothing
            error = f"job process answered for job {job_id} while running job " + (
                str(job.id) if job else "none")
            log.error("%s; process replaced", error)
            if job is None:
                self._replace(proc, error)
            else:
                self._ended(proc, Outcome("failed", error=error, log=error))
            return
        if keep_going:
            proc.state, proc.job = "idle", None
            self._add_plan(job, outcome, duration_ms)
        else:  # the process stopped the job at MAX_RUNTIME and ends
            log.warning("job %s: %s", job.id, outcome.error, extra={"trace_id": job.id})
            proc.end()
            self._add_plan(job, outcome, duration_ms)
            self._respawn(proc)

    def _overdue(self, proc: JobProcess) -> None:
        if proc.state == "starting":
            self._replace(proc, f"job process did not start within {START_TIMEOUT_SECONDS} s")
            return
        outcome = timeout_outcome(proc.max_runtime, "job process killed")
        log.warning("job %s: %s (no answer %g s after MAX_RUNTIME)", proc.job.id, outcome.error,
                    KILL_GRACE_SECONDS, extra={"trace_id": proc.job.id})
        self._ended(proc, outcome)

    def _ended(self, proc: JobProcess, outcome: Outcome) -> None:
        """The job of `proc` ended with `outcome` and so did the process: replace it."""
        job = proc.job
        proc.kill()
        self._add_plan(job, outcome, (time.monotonic() - proc.started_at) * 1000)
        self._respawn(proc)

    def _respawn(self, proc: JobProcess) -> None:
        self._procs.remove(proc)
        if not self._stopping.is_set() and not self._cutting_off:
            self._procs.append(self._new_process())

    def _replace(self, proc: JobProcess, why: str) -> None:
        log.error("%s; starting another in 1 s", why)
        proc.kill()
        self._procs.remove(proc)
        if not self._stopping.is_set():
            self._stopping.wait(1.0)
            self._procs.append(self._new_process())

    def _new_process(self) -> JobProcess:
        return JobProcess(self.app.settings, self.executor.runtime)

    def _close(self) -> None:
        for proc in self._procs:
            if proc.state == "idle":
                proc.stop()
        for proc in self._procs:
            proc.process.join(2)
            proc.kill()
        self._procs = []
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
