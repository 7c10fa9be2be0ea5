"""The pieces that run a claimed row: resolve its handler once, claim, prepare, call the
handler, plan and write the outcome, send any retry (`inline.py` runs one row here with them).

`Runtime` and `JobContext` (what a handler reaches) live in `cronjobs.job.context`; they are
importable from here too."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from .. import limits, store, tracing
from ..app import App
from ..flow import rules as flowrules
from ..handler import Job, task_name
from ..status import Ended, Status
from ..store.db import classify, run_in_transaction
from . import dispatching, failures
from .context import JobContext, Runtime
from .finishing import Finish, HeldFamilies, OutcomeWriter
from .outcome import (
    Outcome,
    disabled,
    from_exception,
    from_return,
    no_handler,
    not_started,
    unreadable,
)
from .pings import PingOut

log = logging.getLogger("cronjobs.worker.loop")

__all__ = ["Executor", "JobContext", "JobReport", "Prepared", "Runtime", "Terms",
           "call_handler", "default_worker_id", "job_of"]


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


@dataclass(frozen=True)
class Terms:
    """A job type's handler in this worker, resolved once per claim (`Executor.terms`):
    what the claim writes (`lease_seconds`, `max_attempts`) and what running a row needs.

    Attributes:
        cls: the handler class, or None when this process has none for the type.
        lease_seconds: MAX_RUNTIME plus the lease grace, seconds (120 s plus grace
            without a handler).
        max_attempts: MAX_ATTEMPTS for a row dispatched without; None without a handler.
        max_runtime_seconds: MAX_RUNTIME, seconds (120 without a handler).
        in_thread: its rows run in a worker thread (ISOLATION "thread", honoured by this
            executor), else in a job process.
    """

    cls: type | None
    lease_seconds: float
    max_attempts: int | None
    max_runtime_seconds: float
    in_thread: bool


@dataclass(frozen=True)
class Prepared:
    """A claimed row made ready to run (`Executor.prepare`): the worker's pool hands it to
    a slot without asking the executor again.

    Attributes:
        job: the row as a `Job`.
        terms: its type's `Terms`.
        instant: the outcome of a run that needs no handler call (no handler, a
            destructive task switched off, an unreadable payload, the switch's read
            unanswered); None: run the handler (its lease is renewed from now on).
    """

    job: Job
    terms: Terms
    instant: Outcome | None


def call_handler(app: App, job: Job, runtime: Runtime | None = None,
                 reraise: tuple[type[BaseException], ...] = (), *,
                 cls: type | None = None) -> Outcome:
    """Build the handler of `job` and call `handle()`; any exception becomes an Outcome
    (with its traceback, formatted here: in the job process, the worker thread or the
    calling thread), except those of the types in `reraise` (the job process's
    MAX_RUNTIME alarm). A raised failure is logged at WARNING on one line naming the
    raising frame (`job 12 failed: KeyError: 'chat_id' (handlers/x.py:42)`); its whole
    traceback at DEBUG. `cls`: the handler class when the caller resolved it already
    (else `app.resolve`)."""
    cls = cls if cls is not None else app.resolve(job.type)
    if cls is None:
        return no_handler(job.type)
    try:
        handler = cls(JobContext(app, job, runtime))
        with tracing.job_span(job) as span:  # a no-op without OpenTelemetry
            outcome = from_return(handler.handle(job.payload, job), handler)
            tracing.job_outcome(span, outcome.kind, outcome.error)
        return outcome
    except reraise:
        raise
    except BaseException as exc:  # even SystemExit: the handler's failure is the row's business
        result = from_exception(exc)
        if result.kind != "retry_later":
            log.warning("job %s failed: %.300s (%s)", job.id, result.error,
                        failures.where(exc, cls) or "no traceback", extra={"trace_id": job.id})
            log.debug("%.20000s", "".join(traceback.format_exception(exc)))
        return result


def job_of(row: dict) -> tuple[Job, Outcome | None]:
    """The `Job` of a claimed row, and None; or, when its stored JSON cannot be decoded
    (nested too deeply, not JSON), the Job without its payload and the `unreadable`
    outcome that fails the row (one bad row never stops a worker)."""
    try:
        return Job.from_row(row), None
    except Exception as exc:  # RecursionError, ValueError, ...: the row's problem only
        return Job.from_row(row, decode=False), unreadable(exc)


def flow_control(app: App, *, wait_for_holds: bool = True) -> store.FlowControl:
    """The flow control of `app`'s handlers and settings (`flowrules`): pauses and blocks
    always; the CONCURRENCY / RATE_LIMIT (per LIMIT_KEY) of every registered handler and
    the `[queues.<queue>]` limits of the settings (`wait_for_holds`: see
    `store.FlowControl`). Time is judged with the database's clock when `app.clock` is the
    system clock."""
    types = {t: flowrules.handler_limits(cls)
             for t, cls in app.handlers.registered_handlers().items()}
    return store.FlowControl(types, flowrules.queue_limits(app.settings.queues),
                             wait_for_holds=wait_for_holds,
                             db_clock=store.flow.uses_db_clock(app.clock))


class Executor:
    """The pieces that run claimed rows: a type's `Terms`, the claim (`claim_rows`),
    `prepare`, `plan` and `done` around the handler's call, the outcome `writer`
    (`finishing.OutcomeWriter`), the leases and stop requests of the rows it runs. The
    worker process (and a burst) builds one for its `pool.SlotPool` and group commit,
    which run the handlers in job processes or worker threads; `inline.InlineRunner`
    runs rows with it in the calling thread (`queue.process`, `cronjobs run`,
    `cronjobs.testing.drain`).

    Args:
        app: the running App (engine, clock, handlers, broker).
        worker_id: written to claimed rows (default `host:pid`).
        isolation: `"handler"` (a handler's `ISOLATION = "thread"` is honoured) or
            `"process"` (every job in a job process); matters to a worker only.
        runtime: handed to every handler's `JobContext` (default: no serve URL).
        on_job_done: called with no arguments after each finished job (the worker's
            recycling limits).
        flow: the flow control of this executor's claims (`store.FlowControl`); True:
            `flow_control(app)` (pauses, blocks, the handlers' and the queues' limits);
            None: none (every due row may be claimed: for measurements).
    """

    def __init__(self, app: App, worker_id: str | None = None, *, isolation: str = "handler",
                 runtime: Runtime | None = None,
                 on_job_done: Callable[[], None] | None = None,
                 flow: store.FlowControl | bool | None = True) -> None:
        if isolation not in ("handler", "process"):
            raise ValueError(f"isolation must be 'handler' or 'process', got {isolation!r}")
        self.app = app
        self.worker_id = worker_id or default_worker_id()
        self.isolation = isolation
        self.runtime = runtime or Runtime()
        self._on_job_done = on_job_done
        if flow is True:
            flow = flow_control(app)
        self.claim_policy = store.ClaimPolicy(self, flow or None)
        self.holds_stored = False  # the last claim's probe found a pause or block stored
        self._families = HeldFamilies()  # the families of the rows this executor runs
        self.writer = OutcomeWriter(app, self.worker_id, held=self._families)
        self.pings = PingOut(app)  # a scheduled run's pings out (`job.pings`)
        self._running: dict[int, tuple[int, float]] = {}  # id -> (attempt, lease seconds)
        self._lock = threading.Lock()
        self.jobs_done = 0

    def terms(self, job_type: str) -> Terms:
        """The `Terms` of `job_type` in this executor: its handler resolved once (and
        whether it has family callbacks noted for the outcome writer)."""
        cls = self.app.resolve(job_type)
        self._families.note_type(job_type, cls)
        self.writer.note_type(job_type, cls)
        runtime = float(cls.MAX_RUNTIME) if cls is not None else 120.0
        return Terms(cls, runtime + self.app.settings.lease_grace_seconds,
                     int(cls.MAX_ATTEMPTS) if cls is not None else None, runtime,
                     cls is not None and cls.ISOLATION == "thread"
                     and self.isolation == "handler")

    def claim_rows(self, conn, now: datetime, *, queue: str | None = None,
                   job_id: int | None = None, limit: int = 1) -> store.Claim:
        """Claim in the caller's transaction (`store.claim_jobs` with this executor's
        handlers and flow control): the best due rows of `queue`, at most `limit`, or row
        `job_id` if it is pending. `now` is the claiming instant (naive UTC). What the
        claim learned of the flow tables goes into this executor's next claim.

        Returns:
            The `store.Claim`: its rows (status `running`, lease set, best first), and
            whether rows wait behind flow control.
        """
        request = store.ClaimRequest(now, self.worker_id, queue, job_id, limit,
                                     self.holds_stored)
        start_ns = time.time_ns()
        claim = store.claim_jobs(conn, request, self.claim_policy)
        self.holds_stored = claim.holds_stored
        if claim.rows and tracing.enabled():
            tracing.claim_span(start_ns, self.worker_id, queue, claim.rows)
        return claim

    def prepare(self, row: dict, terms: Terms) -> Prepared:
        """Make claimed `row` (of a type whose `terms` the claim gave) ready to run: its
        `Job`, and the outcome of a run that needs no handler call (no handler, a
        destructive task switched off, an unreadable payload), else None — and then its
        lease is renewed until `done` (or `untrack`) and a scheduled run's `/start` ping
        is sent (`job.pings`: waited for 0.1 s at most; nothing for a type without a
        ping URL). Never raises: a database that does
        not answer the switch's read puts the row back (`not_started`, no attempt used);
        any other error fails the row (`unreadable`)."""
        job, instant = job_of(row)
        if instant is None:
            instant = self._instant(job, terms.cls)
        if instant is None:
            with self._lock:
                self._running[job.id] = (job.attempts, terms.lease_seconds)
            self._families.add(job.id, job.root_id or job.id)
            self.pings.started(job, terms.cls)
        return Prepared(job, terms, instant)

    def held_families(self, finishing: set[int]) -> set[int]:
        """The families (root ids) of which this executor runs a row besides `finishing`
        (`HeldFamilies.held`)."""
        return self._families.held(finishing)

    def _instant(self, job: Job, cls: type | None) -> Outcome | None:
        try:
            if cls is None:
                return no_handler(job.type)
            if cls.DESTRUCTIVE and not self._task_enabled(job.type):
                return disabled()
            return None
        except Exception as exc:
            if classify(exc) in ("transient", "unavailable"):
                return not_started(f"not started: the database did not answer "
                                   f"({type(exc).__name__})")
            return unreadable(exc)

    def untrack(self, job_id: int) -> None:
        """Stop renewing the lease of `job_id`."""
        with self._lock:
            self._running.pop(job_id, None)
        self._families.drop(job_id)

    def _task_enabled(self, job_type: str) -> bool:
        """The kill switch of the type's task. A task the scheduler has not seen yet is
        off unless the settings enable it (destructive tasks ship disabled)."""
        task = task_name(job_type)
        with self.app.engine.connect() as conn:
            runtime = store.get_runtime(conn, task)
        if runtime is None:
            return self.app.settings.task(task).enabled is True
        return bool(runtime["enabled"])

    def plan(self, job: Job, outcome: Outcome, duration_ms: float) -> Finish:
        """Plan the end of run `job` (see `OutcomeWriter.plan`)."""
        return self.writer.plan(job, outcome, duration_ms)

    def done(self, finish: Finish, final: str) -> JobReport:
        """After the commit: count the job, log its line, send a retry's (delayed)
        message, queue a scheduled run's success or `/fail` ping (`job.pings`), run the
        recycling check. Returns the report. A row put back because its
        job never started (`not_started`: claimed ahead and given back, its job process
        gone) is logged and its message sent, but not counted as a job done. Its lease
        is no longer renewed."""
        job = finish.job
        self.untrack(job.id)
        if final == Ended.LOST:
            log.warning("job %s: lease was lost before finishing; outcome %s dropped",
                        job.id, finish.status, extra={"trace_id": job.id})
        elif final == Status.PENDING:
            dispatching.send(self.app, job.id, job.queue, finish.delay_seconds)
        if finish.ran:
            with self._lock:
                self.jobs_done += 1
            self.pings.ended(job, final, finish.outcome.error)
        log.info("job %s finish type=%s status=%s duration_ms=%.1f attempt=%s/%s", job.id,
                 job.type, final, finish.duration_ms, job.attempts, job.max_attempts or "—",
                 extra={"trace_id": job.id})
        if finish.ran and self._on_job_done is not None:
            self._on_job_done()
        return JobReport(job.id, job.type, final, finish.duration_ms)

    def renew_leases(self) -> int:
        """Extend the lease of every row this process is running; returns rows renewed."""
        with self._lock:
            leases = [(job_id, attempt, lease)
                      for job_id, (attempt, lease) in self._running.items()]
        if not leases:
            return 0
        return run_in_transaction(self.app.engine, lambda c: store.renew_leases(c, leases))

    def stops_requested(self) -> dict[int, str]:
        """The runs of this process an operator asked to stop (`cronjob_stop`): `{job id:
        who asked}`; one read, none while nothing runs."""
        with self._lock:
            runs = [(job_id, attempt) for job_id, (attempt, _) in self._running.items()]
        if not runs:
            return {}
        return run_in_transaction(self.app.engine, lambda c: store.stops.requested(c, runs))
