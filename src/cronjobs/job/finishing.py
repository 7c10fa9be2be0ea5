"""The one writer of outcomes: plan the end of a run, write one plan or a batch in the
caller's transaction, or write plans each in a transaction of its own with the fallback.

Every finished run goes through here: the executor's single-row path (`cronjobs run`,
`queue.process`, `testing.drain`) writes its one plan with `write_each`; the worker's
group commit writes its batch with `write` inside the transaction that also claims, and
when the database refuses that batch, writes the plans again with `write_each`, so only
the outcome the database refuses becomes `unrecordable` (`fatal`, naming why).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection

from .. import limits, store, tracing
from ..app import App
from ..family.settle import Finished, after_finish, task_run_ended
from ..handler import Job, callback_kinds
from ..status import FINAL, Ended, Reason, Status
from ..store.db import classify, retry_while_unavailable, run_in_transaction
from .dispatching import send
from .outcome import Outcome, Policy, next_state, refused, unrecordable
from .webhooks import deliveries, deliveries_added

log = logging.getLogger("cronjobs.worker.loop")

__all__ = ["Finish", "HeldFamilies", "OutcomeWriter"]


@dataclass
class Finish:
    """The planned end of one run: the row's next state and the values to write.

    Attributes:
        job: the run (attempt `job.attempts`).
        outcome: what the handler (or the worker) decided.
        status: the planned status (`completed`, `failed`, `pending`, `cancelled`).
        delay_seconds: for `pending`, seconds until the row is due again.
        values: the columns to write, texts within their limits.
        duration_ms: how long the handler ran, milliseconds.
        now: the clock's time of the plan (naive UTC).
    """

    job: Job
    outcome: Outcome
    status: Status
    delay_seconds: float
    values: dict
    duration_ms: float
    now: datetime

    @property
    def ran(self) -> bool:
        """False for a row put back before its job started (`outcome.not_started`)."""
        return self.outcome.reason != Reason.NOT_STARTED


def task_run(job: Job) -> bool:
    """True for the run of a task (a scheduled slot or a manual run): its end is noted on
    the task's runtime row too."""
    return "slot" in job.payload or bool(job.payload.get("manual"))


def _blocks(job: Job, block: str | None) -> str:
    """What a RetryLater's block holds, for the row's log line (`write_block` decides)."""
    if not block:
        return ""
    if block == "key" and job.limit_key is None:
        return " (blocks the type: the row has no limit key)"
    return f" (blocks the {block})"


def write_block(conn: Connection, plan: Finish, clock) -> dict:
    """Block the row's limit key (or its type: `block="type"`, or a row without a key)
    for the RetryLater's seconds, in the caller's transaction (`store.block`: extended,
    never shortened), from now on the database's clock (`store.flow.flow_now`: `clock`
    is the App's; an injected one counts from its own now). Returns the block as stored."""
    job = plan.job
    key = job.limit_key if plan.outcome.block == "key" else None
    now = store.flow.flow_now(conn, clock)
    until = now + timedelta(seconds=plan.delay_seconds)
    return store.block(conn, job.type, key, now=now, until=until,
                       reason=plan.outcome.block_reason or f"RetryLater from job {job.id}")


def ring(app: App, released: list[tuple[int, str]]) -> None:
    """After the commit: ring the queue of each row a finish made `pending` (a queue once
    per 16 rows: a doorbell wakes a worker, which claims every due row)."""
    sent: dict[str, int] = {}
    for job_id, queue in released:
        sent[queue] = sent.get(queue, 0) + 1
        if sent[queue] <= 16:
            send(app, job_id, queue)


class HeldFamilies:
    """The families (root ids) of the rows one worker runs, for its outcome writer: a
    family of which the worker still runs a row besides those it is writing is left to
    that row's end, which the same worker writes after this transaction
    (`family.settle.after_finish`: no witness read, no lock). Thread-safe."""

    def __init__(self) -> None:
        self._roots: dict[int, int] = {}  # id of a running row -> its family's root
        self._callbacks: dict[str, bool] = {}  # type -> its handler has family callbacks
        self._lock = threading.Lock()

    def note_type(self, job_type: str, cls: type | None) -> None:
        """Whether `job_type`'s handler class `cls` (as the claim resolved it) has family
        callbacks: the writer then need not resolve it again."""
        self._callbacks[job_type] = cls is not None and bool(callback_kinds(cls))

    def has_callbacks(self, job_type: str) -> bool | None:
        """What `note_type` noted of `job_type`; None when it was not."""
        return self._callbacks.get(job_type)

    def add(self, job_id: int, root_id: int) -> None:
        """Row `job_id` of family `root_id` runs here from now on."""
        with self._lock:
            self._roots[job_id] = root_id

    def drop(self, job_id: int) -> None:
        """Row `job_id` no longer runs here (its end was written)."""
        with self._lock:
            self._roots.pop(job_id, None)

    def held(self, finishing: set[int]) -> set[int]:
        """The families of the rows running here besides `finishing` (the rows of the
        transaction being written)."""
        with self._lock:
            return {root for job_id, root in self._roots.items() if job_id not in finishing}


class OutcomeWriter:
    """Plans and writes the end of runs for one worker (or one caller of the executor).

    Args:
        app: its engine, clock and settings (the retry backoff cap, the unknown-type
            grace) are used.
        worker_id: named in the process-log line and the `no_handler` error.
        held: the families of the rows the caller runs (`HeldFamilies`): a family of
            which it runs rows besides those written is decided when those end, by the
            caller, after this transaction (`family.settle`); None: none.
    """

    def __init__(self, app: App, worker_id: str, held: HeldFamilies | None = None) -> None:
        self.app = app
        self.worker_id = worker_id
        self._held = held
        self._webhook_urls: dict[str, str | None] = {}  # type -> its WEBHOOK_URL
        self._policy = Policy(app.settings.retry_backoff_cap_minutes,
                              app.settings.unknown_type_grace_seconds, worker_id)

    def note_type(self, job_type: str, cls: type | None) -> None:
        """`cls`, the handler class the claim resolved for `job_type`: its `WEBHOOK_URL`
        is kept, so an outcome's webhook does not resolve the type again."""
        self._webhook_urls[job_type] = getattr(cls, "WEBHOOK_URL", None)

    def plan(self, job: Job, result: Outcome, duration_ms: float) -> Finish:
        """Plan the end of run `job` after `result`: its next state (`outcome.next_state`)
        and the values to write, with a line added to its bounded process log. An outcome
        that cannot be stored (a result too big, not JSON) becomes `unrecordable`."""
        now = self.app.clock.now()
        try:
            move = next_state(job, result, now, self._policy)
        except Exception as exc:  # ValueError: a result that cannot be stored, ...
            result = unrecordable(exc)
            log.warning("job %s: %.300s", job.id, result.error, extra={"trace_id": job.id})
            move = next_state(job, result, now, self._policy)
        stamp = now.isoformat(" ", "seconds")  # naive UTC: as strftime("%Y-%m-%d %H:%M:%S")
        # A RetryLater or a cut-off gives the attempt back: the line says so.
        back = " (not counted)" if move.values.get("attempts") == job.attempts - 1 else ""
        line = limits.log_line(f"[{stamp}] attempt {job.attempts}/{job.max_attempts or '—'}"
                               f"{back} on {self.worker_id}: {move.status} in "
                               f"{duration_ms:.0f} ms - {result.log}"
                               f"{_blocks(job, result.block)}") + "\n"
        values = dict(move.values, process_logs=limits.bounded_log(job.process_logs, line))
        return Finish(job, result, move.status, move.delay_seconds, values, duration_ms, now)

    def write(self, conn: Connection, plans: list[Finish],
              released: list[tuple[int, str]] | None = None, *,
              batch: set[int] | None = None) -> list[str]:
        """Write `plans` in the caller's transaction; returns their final statuses, in
        order: the planned status, `Ended.DELETED` for a cancelled childless row, or
        `Ended.LOST` when the run no longer held the row (nothing written).

        The common plans (not a cancel, not a task's run) share one statement when there
        are several (`store.finish_many`); the others are written one by one. Then the
        rows waiting for the finished ones are released or cancelled
        (`family.depends.after_finish`: one indexed read when none waits).

        Args:
            released: the rows made `pending` by this write are appended here, `(id,
                queue)`: ring them once the caller's transaction has committed
                (`dispatching.send`); None: the sweep rings their queues.
            batch: the ids of every plan of the caller's batch, when `plans` are part of
                it (`write_each`): none of them counts as a row still held by the caller.

        Raises:
            OutcomesFenced: one of the common plans' runs lost its row: roll the
                transaction back and write each plan alone (`write_each`), which tells it
                apart.
            What the store raises (a refused statement, a lost connection): the caller's
            transaction is then rolled back whole.
        """
        start_ns = time.time_ns()
        simple = [p for p in plans if p.status != Status.CANCELLED and not task_run(p.job)]
        written = store.finish_many(conn, [(p.job.id, p.job.attempts, p.values)
                                           for p in simple]) if len(simple) > 1 else None
        batched = {id(p) for p in simple} if written is not None else set()
        finals = [(plan.status if plan.job.id in written else Ended.LOST)
                  if id(plan) in batched else self._write_one(conn, plan) for plan in plans]
        for plan, final in zip(plans, finals, strict=True):
            if plan.outcome.block and final != Ended.LOST:  # a late outcome blocks nothing
                write_block(conn, plan, self.app.clock)
        if plans:  # the webhooks of these attempts, committed with their outcomes
            if store.webhooks.insert_deliveries(
                    conn, deliveries(self.app, plans, finals, self._webhook_urls), plans[0].now):
                deliveries_added.set()
        ring_after = self._settle(conn, plans, finals, batch)
        if released is not None:
            released += ring_after
        if tracing.enabled():
            tracing.finish_span(start_ns, self.worker_id, [p.job for p in plans])
        return finals

    def _settle(self, conn: Connection, plans: list[Finish], finals: list[str],
                batch: set[int] | None = None) -> list[tuple[int, str]]:
        """What the rows this transaction finished start (`family.settle.after_finish`):
        the rows waiting for them, their families' completions and callbacks. Returns the
        rows made pending, `(id, queue)`."""
        ended = [(plan, final) for plan, final in zip(plans, finals, strict=True)
                 if final in FINAL or final == Ended.DELETED]
        if not ended:
            return []
        return after_finish(conn, self.app, [
            (Finished(p.job.id, p.job.type, p.job.root_id, p.job.idempotency_key,
                      task_run(p.job),
                      self._held.has_callbacks(p.job.type) if self._held else None), final)
             for p, final in ended], ended[0][0].now,
            held=self._held.held({p.job.id for p in plans} | (batch or set()))
            if self._held is not None else None)

    def _write_one(self, conn: Connection, plan: Finish) -> str:
        job, final = plan.job, plan.status
        if final == Status.CANCELLED and store.delete_job(conn, job.id, job.attempts):
            final = Ended.DELETED
        elif not store.finish_job(conn, job.id, job.attempts, plan.values):
            return Ended.LOST
        if task_run(job):  # a completed run's success is its family's (`family.settle`)
            task_run_ended(conn, self.app, job.id, final, plan.now,
                           success=False if final == Status.COMPLETED else None)
        return final

    def write_each(self, plans: list[Finish], *, give_up_seconds: float | None = 600,
                   stop: threading.Event | None = None) -> list[tuple[Finish, str]]:
        """Write each plan in a transaction of its own. While the database is unreachable
        a write is retried (3 s, doubling to 60 s). A plan the database refuses (or that
        breaks on something that is not a database error) is replaced by the
        `outcome.refused` one, written without the refused values.

        Args:
            give_up_seconds: stop waiting for an unreachable database after this long
                (None: never).
            stop: when set, waiting ends (a stopping worker).

        Returns:
            `(plan written, final status)` per plan, in order.

        Raises:
            DatabaseUnavailable: the database stayed unreachable (`give_up_seconds`,
                `stop`); the rows stay `running` until recover-stale takes them back.
            StoreError: a transient error (deadlock) persisted.
            DatabaseRefused: the database refused even the `refused` write.
        """
        batch = {plan.job.id for plan in plans}

        def write(plan: Finish) -> str:
            def transaction(conn: Connection) -> tuple[str, list[tuple[int, str]]]:
                released: list[tuple[int, str]] = []
                return self.write(conn, [plan], released, batch=batch)[0], released

            final, released = retry_while_unavailable(
                lambda: run_in_transaction(self.app.engine, transaction),
                f"finishing job {plan.job.id}", give_up_seconds=give_up_seconds, stop=stop)
            ring(self.app, released)
            return final

        done = []
        for plan in plans:
            try:
                final = write(plan)
            except Exception as exc:
                if classify(exc) not in ("refused", None):
                    raise
                plan = self._replace_refused(plan, exc)
                final = write(plan)
            done.append((plan, final))
        return done

    def _replace_refused(self, plan: Finish, exc: BaseException) -> Finish:
        """The plan that replaces `plan` when the database refused to write it."""
        result = refused(exc)
        log.warning("job %s: %.300s", plan.job.id, result.error, extra={"trace_id": plan.job.id})
        return self.plan(plan.job, result, plan.duration_ms)
