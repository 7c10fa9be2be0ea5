"""`cronjobs worker --burst`: run every row of some queues that is due now, then exit.

A burst worker is a worker process without a broker consumer: the same slots, job
processes and hard MAX_RUNTIME (`pool.SlotPool`), lease renewal and heartbeat, but its
pool is built `until_empty`: its loop ends by itself once the last claim of every queue
gave fewer rows than asked while no job of this process runs and no outcome waits to be
written. After every written outcome the queues are rung again, so rows that the jobs
dispatched (children) and retries that are due by then run too; a row due later, or due
but not claimable (blocked, paused or limited: a row the claim did not return), is left
waiting and counted. "Nothing left" is decided by the table alone, so a burst starts and
finishes with the broker down (a retry's or a child's message that cannot be sent is
logged; the row is the truth).

`cronjobs.testing.drain` reports the same counts (`BurstReport`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from .. import store
from ..app import App
from ..job.executor import Executor, JobReport, flow_control
from ..job.expiry import expire
from ..job.finishing import Finish
from ..status import Status
from ..store.db import run_in_transaction
from . import heartbeat
from .housekeeping import Housekeeper
from .loop import STOP_CHECK_SECONDS, Signals, end_stop_requests
from .pool import SlotPool
from .runner import KILL_GRACE_SECONDS

log = logging.getLogger("cronjobs.worker.loop")

__all__ = ["BurstReport", "BurstWorker", "Waiting", "count_waiting", "run_burst"]


@dataclass(frozen=True)
class Waiting:
    """The `pending` rows of the burst's queues that it left.

    Attributes:
        scheduled_later: rows whose `scheduled_at` is after now (retries inside their
            back-off included).
        held: rows due now that the claim did not return (blocked, paused or limited).
    """

    scheduled_later: int = 0
    held: int = 0

    @property
    def total(self) -> int:
        """Every row left waiting."""
        return self.scheduled_later + self.held


def count_waiting(app: App, queues: list[str]) -> Waiting:
    """Count the `pending` rows of `queues` at the App's clock's now (naive UTC): due
    later, or due now (held, since a claim just returned none of them).

    Raises:
        DatabaseUnavailable, DatabaseRefused, StoreError: see `run_in_transaction`.
    """
    now = app.clock.now()
    later, due = run_in_transaction(app.engine,
                                    lambda c: store.queues.pending_split(c, now, queues))
    return Waiting(scheduled_later=later, held=due)


@dataclass
class BurstReport:
    """What a burst (or `testing.drain`) ran and left.

    Attributes:
        reports: one `JobReport` per run it ended, in the order they ended.
        waiting: the rows of its queues left `pending` (`Waiting`).
        drained: True when it ended because nothing was left to claim (False: a signal
            stopped it, or its job loop broke).
    """

    reports: list[JobReport] = field(default_factory=list)
    waiting: Waiting = field(default_factory=Waiting)
    drained: bool = True

    @property
    def ran(self) -> int:
        """Runs ended (whatever their outcome)."""
        return len(self.reports)

    def _count(self, status: str) -> int:
        return sum(1 for r in self.reports if r.status == status)

    @property
    def completed(self) -> int:
        """Runs whose row ended `completed`."""
        return self._count(Status.COMPLETED)

    @property
    def failed(self) -> int:
        """Runs whose row ended `failed` (no attempt left, or a fatal error)."""
        return self._count(Status.FAILED)

    @property
    def retried(self) -> int:
        """Runs whose row went back to `pending` (a retry, or put back without an
        attempt); it ran again in this burst if it was due in time, else it is waiting."""
        return self._count(Status.PENDING)

    def line(self) -> str:
        """The one-line summary the command prints, e.g. `burst: ran 100 (completed 99,
        failed 1, retried 0); waiting 5 (scheduled later 5, held 0)`. A burst stopped
        before done says `due now N` for the rows due now: it did not try them all, so
        they are not all held."""
        other = self.ran - self.completed - self.failed - self.retried
        ran = (f"ran {self.ran} (completed {self.completed}, failed {self.failed}, "
               f"retried {self.retried}" + (f", other {other}" if other else "") + ")")
        due = "held" if self.drained else "due now"
        waiting = (f"waiting {self.waiting.total} (scheduled later "
                   f"{self.waiting.scheduled_later}, {due} {self.waiting.held})")
        return f"burst: {ran}; {waiting}" + ("" if self.drained else "; stopped before done")


class _BurstExecutor(Executor):
    """An Executor that keeps the report of every run and rings the burst's queues after
    each written outcome (a child or a retry of it may be due)."""

    def __init__(self, app: App, isolation: str) -> None:
        # A burst does not wait for pauses or blocks (it reports their rows as held);
        # it does wait for rows a limit of its queues holds back (they come free by
        # themselves: a running row ends, the rate window moves on).
        super().__init__(app, isolation=isolation,
                         flow=flow_control(app, wait_for_holds=False))
        self.reports: list[JobReport] = []
        self.ring = lambda: None

    def done(self, finish: Finish, final: str) -> JobReport:
        """`Executor.done`, then note the report of a run (not of a row put back
        before its job started: `not_started`) and ring the queues."""
        report = super().done(finish, final)
        if finish.ran:
            self.reports.append(report)
        self.ring()
        return report


class BurstWorker:
    """The slots of a burst: run what is due in `queues`, then stop by itself.

    Args:
        app: the App (engine, handlers; its broker is only sent to, never consumed); give
            it a pool of `worker.connections_needed(slots)`.
        queues: the queue names.
        slots: jobs run at the same time (one job process each).
        isolation: `"handler"` or `"process"` (as `worker.WorkerProcess`).
    """

    def __init__(self, app: App, queues: list[str], slots: int = 8, *,
                 isolation: str = "handler") -> None:
        self.app, self.queues, self.slots = app, queues, slots
        self.executor = _BurstExecutor(app, isolation)
        self.stopped = threading.Event()  # set once stopped: waits for the database end
        self.pool = SlotPool(self.executor, slots, until_empty=True, stopped=self.stopped)
        self.executor.ring = self._ring_all
        self.housekeeper = Housekeeper([
            ("lease renewal", app.settings.lease_renew_seconds, self.executor.renew_leases),
            ("heartbeat", heartbeat.HEARTBEAT_SECONDS, self.beat),
            ("limits", 1.0, self._abandon_overdue),
            ("stop requests", STOP_CHECK_SECONDS,
             lambda: end_stop_requests(self.executor, self.pool)),
        ])

    def _ring_all(self) -> None:
        for queue in self.queues:
            self.pool.ring(queue)

    def beat(self) -> None:
        """Write the heartbeat (a burst shows on the Workers page like any worker)."""
        heartbeat.beat(self.app, self.executor.worker_id, self.queues, "running",
                       self.executor.jobs_done, self.pool.running_ids())

    def _abandon_overdue(self) -> None:
        for job in self.pool.abandon_overdue(KILL_GRACE_SECONDS):
            log.error("job %s (%s, ISOLATION thread) ran past its MAX_RUNTIME and cannot be "
                      "stopped in its thread: timeout recorded; it ends with the burst",
                      job.id, job.type, extra={"trace_id": job.id})

    def run(self, signals: Signals, shutdown_timeout: float = 30) -> BurstReport:
        """Run until nothing is left (or a signal: running jobs get `shutdown_timeout`
        seconds, then are cut off and their rows go back to `pending` without using an
        attempt). Returns the report, with the rows left waiting counted at the end. Rows
        past their `expires_at` are ended `expired` first, as a worker's sweep does."""
        expire(self.app, self.queues)
        self._ring_all()  # before the loop starts: its first turn claims
        self.pool.start()
        try:
            self.beat()
        except Exception as exc:  # database down at start: the housekeeper retries
            log.warning("start-up heartbeat failed (%s); will retry", exc)
        self.housekeeper.start()
        log.info("burst worker %s running what is due in %s with %d slot(s)",
                 self.executor.worker_id, ",".join(self.queues), self.slots)
        pool = self.pool
        while not (pool.emptied.is_set() or pool.failed.is_set() or signals.stop.is_set()):
            signals.stop.wait(0.05)
        if not pool.emptied.is_set():
            cut = pool.drain(shutdown_timeout, signals.urgent)
            if cut:
                log.warning("burst stopped: job(s) cut off, back to pending: %s", cut)
        pool.close("burst")
        self.housekeeper.stop()
        heartbeat.forget(self.app, self.executor.worker_id)
        return BurstReport(list(self.executor.reports), count_waiting(self.app, self.queues),
                           drained=pool.emptied.is_set())


def run_burst(app: App, queues: list[str], slots: int = 8, *, shutdown_timeout: float = 30,
              signals: Signals | None = None, isolation: str = "handler"
              ) -> tuple[int, BurstReport]:
    """Run every row of `queues` that is due now in this process, then return (arguments
    as `BurstWorker`; `signals` default: SIGTERM/SIGINT handlers installed here).

    Returns:
        `(exit status, report)`: 0 when nothing was left to claim, 1 when a signal stopped
        the burst first or its job loop broke.
    """
    signals = signals or Signals().install()
    report = BurstWorker(app, queues, slots, isolation=isolation).run(signals, shutdown_timeout)
    return (0 if report.drained else 1), report
