"""Run one claimed row: resolve its handler, call it, write the outcome, send any retry."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import limits, store
from .db import classify, retry_while_unavailable, run_in_transaction
from .errors import JobNotFound, JobStateError
from .handler import Job
from .outcome import Outcome, Policy, from_exception, from_return, next_state, no_handler

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("cronjobs.worker")


def default_worker_id() -> str:
    """`host:pid` of this process, within the worker id's 128 characters (a long host
    name is shortened)."""
    pid = str(os.getpid())
    return f"{socket.gethostname()[:limits.WORKER_ID_MAX_CHARS - len(pid) - 1]}:{pid}"


@dataclass(frozen=True)
class JobReport:
    """What happened to one row: its id, the status it ended in (`deleted` for a
    cancelled childless row) and how long the handler ran, in milliseconds."""

    id: int
    type: str
    status: str
    duration_ms: float


class JobContext:
    """What a handler can reach while it runs (`handler.context`)."""

    def __init__(self, app: "App", job: Job) -> None:
        self.app = app
        self.job = job

    @property
    def settings(self) -> Any:
        """The system's `Settings`."""
        return self.app.settings

    def now(self) -> datetime:
        """The app clock's current time (naive UTC)."""
        return self.app.clock.now()

    def dispatch_child(self, job_type: str, payload: dict, **options: Any) -> int:
        """Dispatch a job whose parent is the running row; returns its id."""
        from .queue import dispatch

        options.setdefault("parent_id", self.job.id)
        return dispatch(job_type, payload, app=self.app, **options)


def call_handler(app: "App", job: Job, reraise: tuple[type[BaseException], ...] = ()) -> Outcome:
    """Build the handler of `job` and call `handle()`; any exception becomes an Outcome,
    except those of the types in `reraise` (the job process's MAX_RUNTIME alarm)."""
    cls = app.resolve(job.type)
    if cls is None:
        return no_handler(job.type)
    try:
        handler = cls(JobContext(app, job))
        return from_return(handler.handle(job.payload, job), handler)
    except reraise:
        raise
    except BaseException as exc:  # even SystemExit: the handler's failure is the row's business
        outcome = from_exception(exc)
        if outcome.kind != "retry_later":
            log.warning("job %s raised %.300s", job.id, outcome.error, extra={"trace_id": job.id})
            log.debug("%.20000s", "".join(traceback.format_exception(exc)))
        return outcome


class InlineRunner:
    """Runs handlers in the calling thread: no hard MAX_RUNTIME stop. Used by `process()`,
    `cronjobs run` and tests; the worker uses `cronjobs.runner.ChildRunner`."""

    def __init__(self, app: "App") -> None:
        self.app = app

    def run(self, job: Job, max_runtime_seconds: float) -> Outcome:
        """Call the handler of `job` here and return its outcome."""
        return call_handler(self.app, job)

    def close(self) -> None:
        """Nothing to release."""


class Executor:
    """Claims and runs rows for one worker process.

    Args:
        app: the running App (engine, clock, handlers, broker).
        worker_id: written to claimed rows (default `host:pid`).
    """

    def __init__(self, app: "App", worker_id: str | None = None) -> None:
        self.app = app
        self.worker_id = worker_id or default_worker_id()
        self._running: dict[int, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self.jobs_done = 0
        self.runner = InlineRunner(app)
        self.accepting = True
        self.stopped = threading.Event()  # set when the worker stops: outage waits end
        self.on_job_done = None  # called after each finished job (recycling limits)

    def lease_seconds(self, job_type: str) -> float:
        """Lease length for a type: its MAX_RUNTIME plus the configured grace, seconds."""
        cls = self.app.resolve(job_type)
        runtime = float(cls.MAX_RUNTIME) if cls is not None else 120.0
        return runtime + self.app.settings.lease_grace_seconds

    def claim(self, queue: str) -> dict | None:
        """Claim the best due row of `queue` (status `running`, lease set); None when
        nothing is due.

        Raises:
            DatabaseUnavailable, DatabaseRefused, StoreError: see `run_in_transaction`.
        """
        # `now` is read inside the transaction, after any wait for a lock (SQLite).
        return run_in_transaction(self.app.engine, lambda c: store.claim_next(
            c, queue, self.app.clock.now(), self.worker_id, self.lease_seconds))

    def run_next(self, queue: str) -> JobReport | None:
        """Claim the best due row of `queue` and run it; None when nothing is due."""
        row = self.claim(queue)
        return None if row is None else self.run_claimed(row)

    def run_id(self, job_id: int) -> JobReport:
        """Claim row `job_id` (pending, due or not) and run it here and now.

        Raises:
            JobNotFound: no such row.
            JobStateError: the row is not `pending`.
        """
        row = run_in_transaction(self.app.engine, lambda c: store.claim_by_id(
            c, job_id, self.app.clock.now(), self.worker_id, self.lease_seconds))
        if row is None:
            with self.app.engine.connect() as conn:
                current = store.get_job(conn, job_id, ["status"])
            if current is None:
                raise JobNotFound(f"no job with id {job_id}")
            raise JobStateError(f"job {job_id} is {current['status']}, not pending")
        return self.run_claimed(row)

    def run_claimed(self, row: dict) -> JobReport:
        """Run a row this process has claimed (status `running`) and finish it."""
        job = Job.from_row(row)
        log.info("job %s start type=%s attempt=%s/%s", job.id, job.type, job.attempts,
                 job.max_attempts, extra={"trace_id": job.id})
        started = time.monotonic()
        outcome = self._call(job)
        duration_ms = (time.monotonic() - started) * 1000
        try:
            status = self.finish(job, outcome, duration_ms)
        except Exception as exc:  # an outcome we cannot store must still end the row
            if classify(exc) == "unavailable":
                raise  # the database stayed down: the lease expires, recover_stale takes it back
            error = f"could not record the outcome ({type(exc).__name__}: {exc})"
            log.warning("job %s: %.300s", job.id, error, extra={"trace_id": job.id})
            status = self.finish(job, Outcome("fatal", error=error, log=error), duration_ms)
        self.jobs_done += 1
        log.info("job %s finish type=%s status=%s duration_ms=%.1f", job.id, job.type, status,
                 duration_ms, extra={"trace_id": job.id})
        if self.on_job_done is not None:
            self.on_job_done()
        return JobReport(job.id, job.type, status, duration_ms)

    def _call(self, job: Job) -> Outcome:
        cls = self.app.resolve(job.type)
        if cls is None:
            return no_handler(job.type)
        if cls.DESTRUCTIVE and not self._task_enabled(job.type):
            return Outcome("cancelled", result={"reason": "disabled"},
                           log="task is disabled (destructive handler): not run")
        with self._lock:
            self._running[job.id] = (job.attempts, self.lease_seconds(job.type))
        try:
            return self.runner.run(job, float(cls.MAX_RUNTIME))
        finally:
            with self._lock:
                self._running.pop(job.id, None)

    def _task_enabled(self, job_type: str) -> bool:
        """The kill switch of the type's task. A task the scheduler has not seen yet is
        off unless the settings enable it (destructive tasks ship disabled)."""
        from .handler import task_name

        task = task_name(job_type)
        with self.app.engine.connect() as conn:
            runtime = store.get_runtime(conn, task)
        if runtime is None:
            return self.app.settings.task(task).enabled is True
        return bool(runtime["enabled"])

    def finish(self, job: Job, outcome: Outcome, duration_ms: float) -> str:
        """Write `outcome` for the run `job` (attempt `job.attempts`); returns the status
        (`deleted` for a cancelled childless row, `lost` when the lease was taken away).

        A retry's message is sent after the commit, delayed until the row is due. While
        the database is unreachable the write is retried (3 s, doubling to 60 s) for up
        to 10 minutes; a statement the database refuses is not retried.

        Raises:
            ValueError: the result cannot be stored (too big, not JSON).
            DatabaseUnavailable: the database stayed down for 10 minutes.
            DatabaseRefused: the database refused the write.
        """
        now = self.app.clock.now()
        policy = Policy(self.app.settings.retry_backoff_cap_minutes,
                        self.app.settings.unknown_type_grace_seconds, self.worker_id)
        move = next_state(job, outcome, now, policy)
        stamp = now.strftime("%Y-%m-%d %H:%M:%S")
        line = limits.log_line(f"[{stamp}] attempt {job.attempts}/{job.max_attempts} on "
                               f"{self.worker_id}: {move.status} in {duration_ms:.0f} ms - "
                               f"{outcome.log}") + "\n"
        values = dict(move.values, process_logs=limits.bounded_log(job.process_logs, line))

        def write(conn) -> str:  # noqa: ANN001
            final = move.status
            if move.status == "cancelled" and store.delete_job(conn, job.id, job.attempts):
                final = "deleted"
            elif not store.finish_job(conn, job.id, job.attempts, values):
                log.warning("job %s: lease was lost before finishing; outcome %s dropped",
                            job.id, move.status, extra={"trace_id": job.id})
                return "lost"
            if "slot" in job.payload or job.payload.get("manual"):  # a task run
                store.update_task_status(conn, job.id, final, now)
            return final

        final = retry_while_unavailable(lambda: run_in_transaction(self.app.engine, write),
                                        f"finishing job {job.id}")
        if final == "pending":
            self.app.send(job.id, job.queue, move.delay_seconds)
        return final

    def cut_off(self) -> list[int]:
        """Stop every running job now (shutdown timeout); returns their ids. Their rows
        go back to `pending` without using an attempt."""
        cut = getattr(self.runner, "cut_off", None)
        return cut() if cut is not None and self.running_ids() else []

    def renew_leases(self) -> int:
        """Extend the lease of every row this process is running; returns rows renewed."""
        with self._lock:
            leases = [(job_id, attempt, lease) for job_id, (attempt, lease) in self._running.items()]
        if not leases:
            return 0
        return run_in_transaction(self.app.engine, lambda c: store.renew_leases(c, leases))

    def running_ids(self) -> list[int]:
        """Ids of the rows this process is running now."""
        with self._lock:
            return list(self._running)
