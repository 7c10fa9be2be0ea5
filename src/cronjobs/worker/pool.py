"""A worker process's slots: one loop thread keeps `slots` jobs running.

Broker messages are doorbells: a message for queue `q` means "`q` may have due rows". The
worker's message callback only rings (`ring(q)`). The loop does the rest, in one thread,
so a job costs no thread hand-offs:

1. write the outcomes that came in since the last turn and claim the best due rows of the
   rung queues for the idle slots, in **one transaction** (`groupcommit.GroupCommit`);
2. send each claimed row to an idle job process (`procslots.ProcessSlots`), or to a
   thread for handlers that say `ISOLATION = "thread"` (`threadslots.ThreadSlots`);
3. wait until an outcome, a doorbell or a deadline comes (`multiprocessing.connection.wait`
   over the job processes' pipes and the doorbell pipe).

So priority order holds (the best rows are claimed first, whatever order the messages came
in), a duplicated or stray message costs nothing, and several worker processes share a
queue by their free slots.

**Claim ahead.** With short jobs the slots would sit idle while each transaction runs
(its statements and its commit take longer than the jobs). So while a queue has a backlog
and the last `slots` jobs each ended within `AHEAD_QUICK_SECONDS`, a claim also takes up to
`claim_ahead` rows (`slots` x the setting `claim_ahead_per_slot`) beyond the idle slots:
they start in the next slots that free, best first, without waiting for the next
transaction. A row claimed ahead is `running` from its claim (its `started_at` and lease
too); one not started within `AHEAD_WAIT_SECONDS`, or still waiting when the worker stops
taking rows, goes back to `pending` with its attempt given back (`outcome.not_started`),
so a worker never keeps a row from the others for long.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from multiprocessing.connection import wait

from ..handler import Job
from ..job.executor import Executor, Prepared
from ..job.outcome import Outcome, not_started
from .groupcommit import GroupCommit
from .procslots import ProcessSlots
from .runner import JobProcess
from .threadslots import ThreadSlots

log = logging.getLogger("cronjobs.worker.loop")

IDLE_WAKE_SECONDS = 1.0
AHEAD_QUICK_SECONDS = 0.1  # claim ahead only after `slots` jobs in a row ran this long at most
AHEAD_WAIT_SECONDS = 1.0  # a row claimed ahead and not started by then goes back to pending


class SlotPool:
    """`slots` job slots and the loop that keeps them busy.

    Args:
        executor: prepares rows, plans and reports outcomes, tracks leases; its
            `isolation` says which jobs run in threads, its `runtime` reaches every job.
        slots: jobs that run at the same time (one job process each).
        claim_limit: claim no more rows than this in all (`--max-jobs`); None: no limit.
        claim_ahead: rows claimed beyond the idle slots while jobs are short (module
            docstring); default: `slots` x the settings' `claim_ahead_per_slot`; 0: none.
        accepting: rows are claimed only while this event is set (the worker clears it
            when it recycles or stops); default: always.
        stopped: set when the worker has stopped: waits for the database end.
        until_empty: a burst (`burst.BurstWorker`): the loop ends by itself, setting
            `emptied`, once no job runs, no outcome waits to be written and the last
            claim of every rung queue gave fewer rows than asked. Ring the queues before
            `start` and after every written outcome (a child or a retry may be due).
    """

    def __init__(self, executor: Executor, slots: int, *, claim_limit: int | None = None,
                 accepting: threading.Event | None = None,
                 stopped: threading.Event | None = None, until_empty: bool = False,
                 claim_ahead: int | None = None) -> None:
        self.executor = executor
        self.slots = slots
        self.claim_limit = claim_limit
        self.claim_ahead = slots * executor.app.settings.claim_ahead_per_slot \
            if claim_ahead is None else claim_ahead
        self._ahead: list[tuple[float, Prepared]] = []  # claimed ahead: (monotonic, row)
        self._quick_in_row = 0  # jobs that ended one after another within AHEAD_QUICK_SECONDS
        if accepting is None:
            accepting = threading.Event()
            accepting.set()
        self._accepting = accepting
        self._stopped = stopped or threading.Event()
        self._stopping = threading.Event()
        self.failed = threading.Event()  # the loop itself broke: the worker must exit non-zero
        self.until_empty = until_empty
        self.emptied = threading.Event()  # until_empty: nothing was left to claim or run
        self.claimed_total = 0
        self._lock = threading.Lock()  # guards _rung, _slot_of and _stop_asked
        self._rung: dict[str, None] = {}
        self._slot_of: dict[int, int] = {}  # running job id -> its slot, 1..slots
        self._stop_asked: list[tuple[int, Outcome]] = []  # jobs to kill at the next turn
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._commit = GroupCommit(executor, slots, self._stopped, stopping=self._stopping)
        self._writer = executor.writer  # plans each ended run (`finishing.OutcomeWriter`)
        self._threads = ThreadSlots(executor.app, executor.runtime, wake=self._wake)
        self._processes = ProcessSlots(executor.app.settings, executor.runtime, slots,
                                       report=self._add_plan, stopping=self._stopping)
        self._loop_thread = threading.Thread(target=self._loop, name="cronjobs-pool", daemon=True)

    # -- outside the loop ----------------------------------------------------------------
    @property
    def commits(self) -> int:
        """Transactions that wrote outcomes and/or claimed."""
        return self._commit.commits

    @property
    def claims(self) -> int:
        """Claim statements run."""
        return self._commit.claims

    @property
    def _procs(self) -> list[JobProcess]:
        # The job processes, for tests that look at them (their pids, killing one).
        return self._processes.procs

    def start(self) -> None:
        """Start the job processes (waiting until each has loaded the handlers) and the loop."""
        self._processes.start()
        self._loop_thread.start()

    def ring(self, queue: str) -> bool:
        """Say that `queue` may have due rows (a broker message, the sweep, a retry).
        Returns False when it was rung already and its rows are not drained yet (the ring
        adds nothing: the loop claims that queue's rows for every slot that frees)."""
        with self._lock:
            new = queue not in self._rung
            self._rung[queue] = None
        if new:
            self._wake()
        return new

    def is_rung(self, queue: str) -> bool:
        """Whether `queue` is rung and its rows not drained yet."""
        with self._lock:
            return queue in self._rung

    def busy(self) -> int:
        """Jobs running now."""
        return self._threads.busy_count() + self._processes.busy_count()

    def running_ids(self) -> list[int]:
        """Ids of the rows running now."""
        return self._threads.running_ids() + self._processes.running_ids()

    def start_problem(self) -> str | None:
        """Why job processes fail to start (since the last one that did), or None."""
        return self._processes.start_problem

    def job_slots(self) -> dict[int, int]:
        """`{job id: slot}` of the jobs running now (slots numbered 1 to `slots`)."""
        with self._lock:
            return dict(self._slot_of)

    def stop_job(self, job_id: int, result: Outcome) -> str | None:
        """End running job `job_id` with `result` (an operator's Stop), the way MAX_RUNTIME
        does: a thread job is given up now (`"thread"`: the caller recycles the worker);
        the job process of a process job is killed and replaced by the loop at its next turn
        (`"process"`; the loop alone sends jobs to processes, so the kill cannot hit the
        next job of that process). None: it does not run here."""
        if self._threads.give_up(job_id, result) is not None:
            return "thread"
        if job_id not in self._processes.running_ids():
            return None
        with self._lock:
            self._stop_asked.append((job_id, result))
        self._wake()
        return "process"

    def abandon_overdue(self, grace_seconds: float) -> list[Job]:
        """Give up the thread jobs running past MAX_RUNTIME + grace (`ThreadSlots
        .abandon_overdue`); the caller recycles the worker. Returns those jobs."""
        return self._threads.abandon_overdue(grace_seconds)

    def stop(self) -> None:
        """Claim nothing more; the loop ends once every running job has ended."""
        self._stopping.set()
        self._wake()

    def drain(self, timeout_seconds: float, urgent: threading.Event | None = None,
              recycle_reason: str | None = None) -> list[int]:
        """Claim nothing more (`stop`), let the running jobs finish for up to
        `timeout_seconds` (until `urgent` is set, if sooner), then cut off the rest
        (`cut_off`, with `recycle_reason`). Returns the ids cut off."""
        self.stop()
        deadline = time.monotonic() + timeout_seconds
        while self.busy() and time.monotonic() < deadline \
                and not (urgent is not None and urgent.is_set()):
            time.sleep(0.05)
        # Also when nothing looks busy: a job whose process is still starting (the fork
        # server loading) is cut off as soon as it is sent.
        return self.cut_off(recycle_reason)

    def close(self, who: str) -> None:
        """After `drain` (or once emptied): wait up to 15 s for the loop to write the last
        outcomes (a database that is down), then set `stopped`, which ends that wait, and
        give the loop 5 s more to close its job processes. `who` begins the warnings
        (`"shutdown"`, `"burst"`)."""
        if not self.join(15):
            running = self.running_ids()
            if running:
                log.warning("%s: job(s) of thread handlers still running end with the "
                            "process: %s", who, running)
            else:  # the loop waits for the database to write the last outcomes
                log.warning("%s: the database did not come back within 15 s to take the "
                            "last outcomes", who)
        self._stopped.set()
        self.join(5)

    def cut_off(self, recycle_reason: str | None = None) -> list[int]:
        """Kill the job processes of every running job (shutdown timeout reached) and
        return their ids. Stopped by a signal (a deploy), their rows go back to `pending`
        without using an attempt. Stopped because the worker recycles (`recycle_reason`,
        e.g. its memory limit), the cut-off uses the attempt: the job may be the cause, and
        one that always outlives the limit must end `failed`, not loop."""
        ids = self._processes.cut_off(recycle_reason)
        self._wake()
        return ids

    def join(self, timeout_seconds: float) -> bool:
        """Wait up to `timeout_seconds` for the loop to end; True when it did."""
        self._loop_thread.join(timeout_seconds)
        return not self._loop_thread.is_alive()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):  # already awake (pipe full) or closed
            pass

    # -- the loop ------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                self._kill_asked()
                for job, outcome, duration_ms in self._threads.collect():
                    self._add_plan(job, outcome, duration_ms)
                self._start_ahead()
                if self._finished():
                    return
                if not self._commit.holding(self._free(), self._stopping.is_set()):
                    now = time.monotonic()
                    self._ahead += [(now, row) for row in self._cycle()]
                    self._start_ahead()
                if self.until_empty and self._empty():
                    self.emptied.set()
                    return
                if self._finished():  # the last outcomes just written: not a wait more
                    return
                self._wait()
        except Exception:  # never die silently: the worker would hang with its slots
            # Rows are guarded one by one (`_dispatch`, the slots, the writer's fallback),
            # so this is the loop itself (a claim the database refuses, a bug): the process
            # must exit non-zero so that its supervisor starts a new one.
            log.exception("the worker's job loop failed; the worker exits with status 1")
            self._stopping.set()
            self.failed.set()
        finally:
            self._close()

    def _finished(self) -> bool:
        """The worker stops, no job runs and no outcome waits (to be collected from a
        thread or written): the loop may end."""
        return self._stopping.is_set() and not self.busy() and not self._commit.waiting() \
            and not self._threads.ended_uncollected()

    def _kill_asked(self) -> None:
        """Kill the job processes of the jobs an operator stopped (`stop_job`)."""
        with self._lock:
            asked, self._stop_asked = self._stop_asked, []
        for job_id, result in asked:
            self._processes.stop(job_id, result)

    def _empty(self) -> bool:
        """No job runs, no outcome waits and every rung queue was drained by a claim."""
        with self._lock:
            rung = bool(self._rung)
        return not rung and not self._ahead and not self.busy() and not self._commit.waiting()

    def _taking_rows(self) -> bool:
        """False once the worker stops or recycles: nothing more is claimed or started."""
        return self._accepting.is_set() and not self._stopping.is_set()

    def _free(self) -> int:
        return min(self._processes.idle(), self.slots - self.busy())

    def _wants(self) -> list[tuple[str, int]]:
        """`(queue, rows)` to claim now: the idle slots (and the rows to claim ahead),
        rung queue by rung queue."""
        if not self._taking_rows():
            return []
        free = self._free() - len(self._ahead)
        if self.claim_ahead and self._commit.backlog and self._quick_in_row >= self.slots:
            free += self.claim_ahead
        if self.claim_limit is not None:
            free = min(free, self.claim_limit - self.claimed_total)
        with self._lock:
            rung = list(self._rung)
        return [(q, free) for q in rung] if free > 0 else []

    def _cycle(self) -> list[Prepared]:
        """Write the waiting outcomes and claim rows for the idle slots; returns the rows."""
        rows, drained = self._commit.cycle(self._wants())
        self.claimed_total += len(rows)
        with self._lock:
            for queue in drained:
                self._rung.pop(queue, None)
        return rows

    def _start_ahead(self) -> None:
        """Start the rows claimed (ahead) in the slots that are free, best first; give
        back those that waited `AHEAD_WAIT_SECONDS`, and every one once the worker stops
        taking rows: `pending` again, attempt unused."""
        if not self._ahead:
            return
        stop = not self._taking_rows()
        while self._ahead and not stop and self._free() > 0:
            self._dispatch(self._ahead.pop(0)[1])
        late = time.monotonic() - AHEAD_WAIT_SECONDS
        kept = []
        for since, ready in self._ahead:
            if stop or since <= late:
                job = ready.job
                self.claimed_total -= 1  # not a job of `claim_limit` (`--max-jobs`)
                self._add_plan(job, not_started(
                    "claimed ahead of a free slot and not started: given back"), 0.0)
            else:
                kept.append((since, ready))
        if len(kept) < len(self._ahead) and not stop:
            self._quick_in_row = 0  # the slots did not turn over fast: stop claiming ahead
        self._ahead = kept

    def _dispatch(self, ready: Prepared) -> None:
        """Start the claimed row `ready` in a job process or a thread. Nothing in one row
        can stop the loop: a row that cannot be prepared or sent fails alone."""
        job = ready.job
        if ready.instant is not None:
            self._add_plan(job, ready.instant, 0.0)
            return
        with self._lock:
            taken = set(self._slot_of.values())
            self._slot_of[job.id] = next(
                (n for n in range(1, self.slots + 1) if n not in taken), len(taken) + 1)
        if ready.terms.in_thread:
            self._threads.start(job, ready.terms.max_runtime_seconds, ready.terms.cls)
        else:
            self._processes.send(job, ready.terms.max_runtime_seconds)

    def _add_plan(self, job: Job, outcome: Outcome, duration_ms: float) -> None:
        """The run of `job` ended (or never started): its plan waits for the next cycle,
        whose `Executor.done` stops renewing its lease."""
        quick = duration_ms <= AHEAD_QUICK_SECONDS * 1000
        self._quick_in_row = self._quick_in_row + 1 if quick else 0
        with self._lock:
            self._slot_of.pop(job.id, None)
        self._commit.add(self._writer.plan(job, outcome, duration_ms))

    def _wait(self) -> None:
        now = time.monotonic()
        timeout = IDLE_WAKE_SECONDS
        deadline = self._processes.next_deadline()
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline - now))
        window = self._commit.window_left()
        if window is not None:
            timeout = min(timeout, window)
        retry = self._commit.retry_left()  # a rate admits its next start then
        if retry is not None:
            timeout = min(timeout, retry)
        if self._ahead:  # give back the rows claimed ahead that wait too long
            timeout = max(0.0, min(timeout, self._ahead[0][0] + AHEAD_WAIT_SECONDS - now))
        conns = self._processes.conns()
        ready = wait([*conns, self._wake_r], timeout)
        if self._wake_r in ready:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
        self._processes.serve(ready)

    def _close(self) -> None:
        self._processes.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
