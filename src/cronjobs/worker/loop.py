"""`cronjobs worker`: the slots of one worker process (`children`: N of them).

A worker process has `--slots` slots (`pool.SlotPool`): broker messages ring it; its
loop claims due rows in batches for idle slots, runs each in a job process
(`runner.JobProcess`, the hard MAX_RUNTIME stop) or, for handlers that say
`ISOLATION = "thread"`, in a thread, and writes outcomes together with the next claim in one
transaction. It renews the leases of its running rows, ends the jobs an operator asked
to stop (read every second), writes a heartbeat every 10 s (and within a second when its
running jobs change), rings queues whose rows wait too long (the sweep) and recycles itself at
`--max-jobs`, `--memory-limit` or `--time-limit`: it finishes its current jobs and exits 0 so that
supervisor/systemd start a fresh one. SIGTERM/SIGINT stop intake and let running jobs
finish for up to `--shutdown-timeout` seconds; jobs still running then are cut off and
their rows go back to `pending` without using an attempt. A second SIGINT cuts off at once.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass

import tenacity

from .. import store
from ..app import App
from ..job.context import Runtime
from ..job.executor import Executor
from ..job.expiry import expire
from ..job.finishing import ring
from ..job.outcome import stopped
from ..store.db import run_in_transaction
from . import heartbeat
from .housekeeping import Housekeeper
from .pool import SlotPool
from .relay import Relay
from .runner import KILL_GRACE_SECONDS
from .sweep import release_waiting, sweep
from .webhooks import WebhookSender

log = logging.getLogger("cronjobs.worker.loop")

STOP_CHECK_SECONDS = 1.0  # how often a worker reads the stop requests of its running jobs
FLOW_PRUNE_SECONDS = 60.0  # how often a worker deletes ended pauses and blocks


@dataclass(frozen=True)
class Limits:
    """When a worker process recycles itself (None = no limit).

    Attributes:
        max_jobs: jobs run by this process.
        memory_mb: resident memory of the process and its job processes, in MB.
        time_seconds: seconds since the process started.
    """

    max_jobs: int | None = None
    memory_mb: float | None = None
    time_seconds: float | None = None


class Signals:
    """First SIGTERM/SIGINT sets `stop`; a second SIGINT also sets `urgent`.

    Args:
        stopping: what the process says it stops, logged at the first signal (`received
            SIGTERM: <stopping>`); the default is a worker's.
        logger: the logger that says it (default `cronjobs.worker.loop`).
        urgent: what a second SIGINT does, logged (a process without running jobs:
            None, "already stopping").
    """

    WORKER = "no new jobs; finishing the running ones"

    def __init__(self, stopping: str = WORKER, logger: logging.Logger | None = None,
                 urgent: str | None = "cutting running jobs off now") -> None:
        self.stop = threading.Event()
        self.urgent = threading.Event()
        self.stopping = stopping
        self.urgent_says = urgent or "already stopping"
        self.log = logger or log

    def install(self) -> Signals:
        """Install the handlers (main thread only)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        return self

    def _on_signal(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        if self.stop.is_set() and signum == signal.SIGINT:
            self.log.warning("second SIGINT: %s", self.urgent_says)
            self.urgent.set()
        else:
            self.log.info("received %s: %s", name, self.stopping)
        self.stop.set()


def connections_needed(slots: int) -> int:
    """Database connections a worker process of `slots` slots keeps open: one per slot
    (handlers that run in a thread use the worker's engine) plus the loop, the housekeeper
    and the consumer. Build the worker's App with `App(settings, pool_size=...)` of this,
    so no connection is opened and closed per job."""
    return slots + 3


def end_stop_requests(executor: Executor, pool: SlotPool) -> list[tuple[int, str]]:
    """End the running jobs of `pool` an operator asked to stop (`cronjobs stop`, the
    dashboard's Stop), as MAX_RUNTIME does: outcome `stopped`, failed, not retried.

    Returns:
        `(job id, how)` of each job ended: `how` as `SlotPool.stop_job` says (`"thread"`:
        given up in its thread; the caller decides whether to recycle).
    """
    ended = []
    for job_id, who in executor.stops_requested().items():
        how = pool.stop_job(job_id, stopped(who))
        if how is not None:
            log.warning("job %s: stop requested by an operator (%s); ending it", job_id,
                        who, extra={"trace_id": job_id})
            ended.append((job_id, how))
    return ended


class WorkerProcess:
    """The slots of one worker process and what keeps them going.

    The process owns its `Executor`, its `SlotPool` and the broker consumer it starts;
    whether it still takes rows (`accepting`) and whether it has stopped (`stopped`) are
    its own state.

    Args:
        app: the App (its engine, broker and handlers are used); give it a connection
            pool of `connections_needed(slots)` (the worker command does).
        queues: queue names to consume.
        slots: jobs run at the same time (one job process each).
        limits: recycling limits.
        prefetch: messages the Dramatiq consumer fetches per queue at a time (default
            2 x slots, at least 16). Messages only ring the pool, so this holds no work.
        isolation: `"handler"` (each handler's ISOLATION, "process" unless it says
            "thread") or `"process"` (every job in a job process).
        serve_url: the base URL of the `cronjobs serve` process this worker runs in
            (handlers read it as `context.serve_url`); None for a worker alone.
    """

    def __init__(self, app: App, queues: list[str], slots: int = 8, *,
                 limits: Limits = Limits(), prefetch: int | None = None,
                 isolation: str = "handler", serve_url: str | None = None) -> None:
        self.app, self.queues, self.slots, self.limits = app, queues, slots, limits
        self._started = time.monotonic()
        self.accepting = threading.Event()  # cleared when recycling or stopping
        self.accepting.set()
        self.stopped = threading.Event()  # set once stopped: waits for the database end
        self.recycle = threading.Event()
        self.recycle_reason: str | None = None
        self.status = "running"
        self.executor = Executor(app, isolation=isolation, runtime=Runtime(serve_url),
                                 on_job_done=self._after_job)
        self.pool = SlotPool(self.executor, slots, claim_limit=limits.max_jobs,
                             accepting=self.accepting, stopped=self.stopped)
        embedded = app.settings.embedded_broker
        # Other processes cannot reach an in-process broker: the sweep is their delivery.
        sweep_every = min(app.settings.sweep_interval_seconds, 2.0) if embedded \
            else app.settings.sweep_interval_seconds
        self._sweep_idle = 1.0 if embedded else app.settings.sweep_after_seconds
        self.housekeeper = Housekeeper([
            ("lease renewal", app.settings.lease_renew_seconds, self.executor.renew_leases),
            ("heartbeat", heartbeat.HEARTBEAT_SECONDS, self.beat),
            ("sweep", sweep_every, self.sweep),
            ("limits", 1.0, self.check_limits),
            ("stop requests", STOP_CHECK_SECONDS, self.watch_runs),
            ("ended pauses and blocks", FLOW_PRUNE_SECONDS, self.prune_flow),
        ])
        self.relay = Relay(app, self._wants_doorbell)
        self.webhooks = WebhookSender(app)  # the deliveries of finished attempts
        self._beaten_slots: dict[int, int] | None = None  # the job slots the last beat named
        self._beaten_status = self.status  # the status the last beat wrote
        self._memory_mb: float | None = None
        # The actor only rings the pool; its threads are there to acknowledge messages
        # (one Redis round trip each) while others arrive. Made before the loop starts:
        # a broker that cannot be set up fails the worker before it claims anything.
        self.consumer = app.broker.consume(queues, self.on_message, threads=min(slots, 8),
                                           prefetch=prefetch or max(16, 2 * slots))

    def on_message(self, queue: str, job_id: int) -> None:
        """A broker message (a consumer thread): it rings the pool, whose loop claims the
        best due rows of `queue` for its idle slots; when the pool was rung for `queue`
        already (its slots busy, or a burst's doorbells arriving before its claim) it is
        also passed on to the broker for another worker (`Relay.pass_on`). A worker that
        is recycling or stopping (or whose loop broke) claims nothing: it holds the
        doorbell and puts it back on the broker for another worker once its consumer has
        stopped (`Relay.hold`, `Relay.put_back`); the row stays `pending`, nothing is lost."""
        if self.accepting.is_set() and not self.pool.failed.is_set():
            if not self.pool.ring(queue) and not self.app.settings.embedded_broker:
                self.relay.pass_on(queue, job_id)
        else:
            self.relay.hold(queue, job_id)

    def _wants_doorbell(self, queue: str) -> bool:
        return self.accepting.is_set() and self.pool.is_rung(queue)

    def start(self) -> None:
        """Start the slots and the consumer; rows left pending by a previous run are
        claimed at once (every queue is rung before the slots' loop starts, so its first
        claim runs while the consumer connects and starts its threads)."""
        for queue in self.queues:
            self.pool.ring(queue)
        self.pool.start()
        self.consumer.start()
        try:
            self.beat()
        except Exception as exc:  # database down at start: the housekeeper retries
            log.warning("start-up heartbeat failed (%s); will retry", exc)
        self.housekeeper.start()
        self.webhooks.start()
        log.info("worker %s consuming %s with %d slot(s)", self.executor.worker_id,
                 ",".join(self.queues), self.slots)

    def prune_flow(self) -> dict[str, int]:
        """Delete the pauses and blocks that ended and the old rate-limit starts
        (`store.prune_expired`): while an ended one stays, every claim checks each
        candidate against it; ended as judged on the database's clock
        (`store.flow.flow_now`): a host whose clock runs ahead prunes nothing live.
        Returns the counts deleted."""
        return run_in_transaction(self.app.engine, lambda conn: store.prune_expired(
            conn, store.flow.flow_now(conn, self.app.clock)))

    def sweep(self) -> int:
        """Ring the queues of this process that have due rows pending for longer than
        `sweep_after_seconds` (their message was lost, or came while every slot was busy);
        returns how many queues were rung. Rows of its queues past their `expires_at` are
        ended `expired` first (`job.expiry.expire`: never claimed, whatever holds them)."""
        expire(self.app, self.queues)
        queues = sweep(self.app, self.queues, idle_seconds=self._sweep_idle)
        for queue in queues:
            self.pool.ring(queue)
        ring(self.app, release_waiting(self.app))  # waiting rows a finish did not decide
        return len(queues)

    def beat(self, early: bool = False) -> None:
        """Write the heartbeat (`early`: the running jobs changed before the next one is
        due; the memory is not measured again)."""
        if not early or self._memory_mb is None:
            self._memory_mb = round(self.memory_mb(), 1)
        job_slots = self.pool.job_slots()
        status = self._status()
        heartbeat.beat(self.app, self.executor.worker_id, self.queues, status,
                       self.executor.jobs_done, self.pool.running_ids(),
                       memory_mb=self._memory_mb, slots=self.slots, job_slots=job_slots)
        self._beaten_slots, self._beaten_status = job_slots, status

    def _status(self) -> str:
        """The heartbeat's status: `stalled` (`heartbeat.STALLED`) while job processes
        fail to start (`cronjobs workers` and health show it; the log says why)."""
        if self.status == "running" and self.pool.start_problem():
            return heartbeat.STALLED
        return self.status

    def watch_runs(self) -> None:
        """Every second (the housekeeper): end the jobs an operator asked to stop, as
        MAX_RUNTIME does (`stopped` outcome: failed, not retried; a stopped thread job
        makes the worker recycle), and write the heartbeat early when the running jobs
        changed (or its status: `_status`), so the Workers page's busy slots are about a
        second old."""
        for job_id, how in end_stop_requests(self.executor, self.pool):
            if how == "thread":
                self._recycle(f"thread job {job_id} stopped by an operator")
        if self.pool.job_slots() != self._beaten_slots or self._status() != self._beaten_status:
            self.beat(early=True)

    @property
    def failed(self) -> bool:
        """True when the job loop itself broke: the process must exit non-zero."""
        return self.pool.failed.is_set()

    def _after_job(self) -> None:
        if self.limits.max_jobs is not None and self.executor.jobs_done >= self.limits.max_jobs:
            self._recycle(f"max-jobs {self.limits.max_jobs} reached")

    def check_limits(self) -> None:
        """Start recycling when a limit is reached, or when a job of a handler with
        `ISOLATION = "thread"` runs past MAX_RUNTIME (called every second)."""
        limits = self.limits
        if (limits.time_seconds is not None
                and time.monotonic() - self._started >= limits.time_seconds):
            self._recycle(f"time-limit {limits.time_seconds:g} s reached")
        if limits.memory_mb is not None:
            used = self.memory_mb()
            if used >= limits.memory_mb:
                self._recycle(f"memory-limit {limits.memory_mb:g} MB reached ({used:.0f} MB)")
        for job in self.pool.abandon_overdue(KILL_GRACE_SECONDS):
            log.error("job %s (%s, ISOLATION thread) ran past its MAX_RUNTIME and cannot be "
                      "stopped in its thread: timeout recorded, the worker recycles so that it "
                      "ends with the process", job.id, job.type, extra={"trace_id": job.id})
            self._recycle(f"thread job {job.id} past MAX_RUNTIME")

    def memory_mb(self) -> float:
        """Memory of this process and its job processes (PSS: a page shared by several
        processes counts once), in MB."""
        import psutil

        me = psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                total += proc.memory_full_info().pss
            except psutil.Error:
                pass
        return total / 1e6

    def _recycle(self, reason: str) -> None:
        if not self.recycle.is_set():
            self.recycle_reason = reason
            self.accepting.clear()
            log.info("worker %s recycling: %s (%d jobs done); finishing current jobs, then "
                     "exit 0", self.executor.worker_id, reason, self.executor.jobs_done)
            self.recycle.set()

    def shutdown(self, timeout_seconds: float, urgent: threading.Event | None = None) -> None:
        """Stop intake, let running jobs finish for up to `timeout_seconds`, then cut the
        rest off and release everything. Cut-off rows go back to `pending` without using
        an attempt after a signal; when the worker recycles (a limit), the cut-off uses the
        attempt, so a job that always outlives a limit ends `failed` instead of looping."""
        self.status = "stopping"
        self.accepting.clear()
        self.consumer.stop(timeout=1000)  # the actor only rings: nothing to wait for
        self.relay.put_back()
        cut = self.pool.drain(timeout_seconds, urgent, self.recycle_reason)
        if cut and self.recycle_reason:
            log.warning("recycling: %d job(s) still running after %.0f s cut off, attempt "
                        "used (retried with backoff, or failed): %s", len(cut),
                        timeout_seconds, cut)
        elif cut:
            log.warning("shutdown: %d job(s) still running after %.0f s cut off, back to "
                        "pending: %s", len(cut), timeout_seconds, cut)
        self.pool.close("shutdown")
        self.housekeeper.stop()
        # A turn stuck on a database that does not answer is left behind (its deliveries
        # stay leased: the next worker sends them once the lease runs out).
        self.webhooks.stop(timeout_seconds=1.0)
        self.executor.pings.sender.flush(2.0)  # the last runs' pings out, briefly
        log.info("worker %s stopped: %d jobs, %d claim statements, %d transactions",
                 self.executor.worker_id, self.executor.jobs_done, self.pool.claims,
                 self.pool.commits)
        heartbeat.forget(self.app, self.executor.worker_id)


def run_worker(app: App, queues: list[str], slots: int = 8, *, limits: Limits = Limits(),
               shutdown_timeout: float = 30, signals: Signals | None = None,
               prefetch: int | None = None, isolation: str = "handler") -> int:
    """Consume `queues` in this process until a signal or a recycling limit (arguments as
    `WorkerProcess`; give `app` a pool of `connections_needed(slots)`).

    Returns:
        0 after a signal or a recycling limit; 1 when the job loop itself broke (so that
        supervisor/systemd start a new process instead of keeping one that looks alive).
    """
    signals = signals or Signals().install()
    process = WorkerProcess(app, queues, slots, limits=limits, prefetch=prefetch,
                            isolation=isolation)
    process.start()
    while not signals.stop.is_set() and not process.recycle.is_set() and not process.failed:
        signals.stop.wait(0.2)
    process.shutdown(shutdown_timeout, signals.urgent)
    return 1 if process.failed else 0


_RESTART_WAIT = tenacity.wait_exponential(multiplier=1, max=30)


def _restart_pause(failures: int) -> float:
    """Seconds before a failed child is started again: 0 after a clean exit (recycling),
    then 1, 2, 4 ... up to 30 s (the same back-off library as the database retries)."""
    if failures == 0:
        return 0.0
    state = tenacity.RetryCallState(None, None, (), {})
    state.attempt_number = failures
    return _RESTART_WAIT(state)
