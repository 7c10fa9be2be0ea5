"""Run one claimed row: resolve its handler, call it, write the outcome, send any retry."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError

from . import store
from .db import run_in_transaction
from .errors import JobNotFound, JobStateError, StoreError
from .handler import Job
from .outcome import Outcome, backoff_seconds, from_exception, from_return

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("cronjobs.worker")

MAX_RESULT_CHARS = 1_000_000  # a stored result beyond this is refused (packet limits)


def default_worker_id() -> str:
    """`host:pid` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


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


def call_handler(app: "App", job: Job) -> Outcome:
    """Build the handler of `job` and call `handle()`; any exception becomes an Outcome."""
    cls = app.resolve(job.type)
    if cls is None:
        error = f"no handler registered for type {job.type!r}"
        return Outcome("fatal", error=error, log=error)
    try:
        handler = cls(JobContext(app, job))
        return from_return(handler.handle(job.payload, job), handler)
    except BaseException as exc:  # even SystemExit: the handler's failure is the row's business
        outcome = from_exception(exc)
        if outcome.kind != "retry_later":
            log.warning("job %s raised %s", job.id, outcome.error, extra={"trace_id": job.id})
            log.debug("".join(traceback.format_exception(exc)))
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
        self.on_job_done = None  # called after each finished job (recycling limits)

    def lease_seconds(self, job_type: str) -> float:
        """Lease length for a type: its MAX_RUNTIME plus the configured grace, seconds."""
        cls = self.app.resolve(job_type)
        runtime = float(cls.MAX_RUNTIME) if cls is not None else 120.0
        return runtime + self.app.settings.lease_grace_seconds

    def run_next(self, queue: str) -> JobReport | None:
        """Claim the best due row of `queue` and run it; None when nothing is due."""
        # `now` is read inside the transaction, after any wait for a lock (SQLite).
        row = run_in_transaction(self.app.engine, lambda c: store.claim_next(
            c, queue, self.app.clock.now(), self.worker_id, self.lease_seconds))
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
        except (DBAPIError, StoreError):
            raise  # the database stayed down: the lease expires, recover_stale takes it back
        except Exception as exc:  # an outcome we cannot store must still end the row
            error = f"could not record the outcome ({type(exc).__name__}: {exc})"
            log.warning("job %s: %s", job.id, error, extra={"trace_id": job.id})
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
            error = f"no handler registered for type {job.type!r}"
            return Outcome("fatal", error=error, log=error)
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
        """Write `outcome` for the run `job` (attempt `job.attempts`); returns the status.

        A retry's message is sent after the commit, delayed until the row is due.
        """
        now = self.app.clock.now()
        values, status, delay = self._next_state(job, outcome, now)
        stamp = now.strftime("%Y-%m-%d %H:%M:%S")
        line = (f"[{stamp}] attempt {job.attempts}/{job.max_attempts} on {self.worker_id}: "
                f"{status} in {duration_ms:.0f} ms - {outcome.log}\n")

        def write(conn) -> str:  # noqa: ANN001
            final = status
            if status == "cancelled" and store.count_children(conn, job.id) == 0:
                store.delete_job(conn, job.id, job.attempts)
                final = "deleted"
            elif not store.finish_job(conn, job.id, job.attempts, values, line):
                log.warning("job %s: lease was lost before finishing; outcome %s dropped",
                            job.id, status, extra={"trace_id": job.id})
                return "lost"
            if "slot" in job.payload or job.payload.get("manual"):  # a task run
                store.update_task_status(conn, job.id, final, now)
            return final

        final = self._retry_while_down(lambda: run_in_transaction(self.app.engine, write),
                                       f"finishing job {job.id}")
        if final == "pending":
            self.app.send(job.id, job.queue, delay)
        return final

    def _next_state(self, job: Job, outcome: Outcome, now: datetime) -> tuple[dict, str, float]:
        values: dict[str, Any] = {"updated_at": now, "locked_until": None}
        if outcome.result is not None:
            text = json.dumps(outcome.result, default=str, allow_nan=False)
            if len(text) > MAX_RESULT_CHARS:
                raise ValueError(f"result is {len(text)} characters of JSON; the limit is "
                                 f"{MAX_RESULT_CHARS}")
            values["result_payload"] = text
        values["error"] = outcome.error[:65000] if outcome.error is not None else None
        kind, delay = outcome.kind, 0.0
        if kind == "cut_off":  # the worker stopped before the job ended: attempt not used
            values.update(status="pending", attempts=job.attempts - 1, scheduled_at=None)
            return values, "pending", 0.0
        if kind == "retry_later":
            delay = outcome.delay_seconds
            values.update(status="pending", attempts=job.attempts - 1,
                          scheduled_at=now + timedelta(seconds=delay))
            return values, "pending", delay
        if kind == "failed" and job.attempts < job.max_attempts:
            delay = backoff_seconds(job.attempts, self.app.settings.retry_backoff_cap_minutes)
            values.update(status="pending", scheduled_at=now + timedelta(seconds=delay))
            return values, "pending", delay
        status = "failed" if kind in ("failed", "fatal") else kind
        values.update(status=status, finished_at=now)
        return values, status, delay

    def _retry_while_down(self, fn, what: str, give_up_seconds: float = 600):  # noqa: ANN001, ANN202
        """Call `fn` until the database answers: 3 s, then growing to 60 s between tries.

        After `give_up_seconds` the error is raised; the row then stays `running` until
        its lease expires and `recover_stale` takes it back (nothing is lost).
        """
        pause, deadline = 3.0, time.monotonic() + give_up_seconds
        while True:
            try:
                return fn()
            except (DBAPIError, StoreError) as exc:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("database unavailable while %s (%s); retrying in %.0f s", what,
                            type(exc).__name__, pause)
                time.sleep(pause)
                pause = min(pause * 2, 60.0)

    def cut_off(self) -> list[int]:
        """Stop every running job now (shutdown timeout); returns their ids. Their rows
        go back to `pending` without using an attempt."""
        cut = getattr(self.runner, "cut_off", None)
        return cut() if cut is not None and self.running_ids() else []

    def renew_leases(self) -> int:
        """Extend the lease of every row this process is running; returns rows renewed."""
        now = self.app.clock.now()
        with self._lock:
            leases = [(job_id, attempt, now + timedelta(seconds=lease))
                      for job_id, (attempt, lease) in self._running.items()]
        if not leases:
            return 0
        return run_in_transaction(self.app.engine, lambda c: store.renew_leases(c, leases))

    def running_ids(self) -> list[int]:
        """Ids of the rows this process is running now."""
        with self._lock:
            return list(self._running)
