"""Group commit: the outcomes waiting to be written and the next claim, in one transaction.

The pool's loop hands every ended run here as a plan (`add`). A `cycle` writes all of
them (`finishing.OutcomeWriter.write`: one statement for the common ones) and claims the
best due rows of the rung queues for the idle slots, in **one transaction**, so a worker
with a backlog commits once per several jobs. With a backlog and few free slots the loop
holds for up to `BATCH_WINDOW_SECONDS` for more slots to come free (`holding`).

When the database refuses the transaction (or it breaks on something that is not a
database error), the plans are written again one by one (`OutcomeWriter.write_each`), so
only the outcome the database refuses becomes `unrecordable`, and the claim runs alone.
So is a batch one of whose runs lost its row (`OutcomesFenced`, after `recover-stale`
took a lease back): written alone, that run writes nothing and the others are written. A
claim that fails alone is the loop's own failure: it raises. While the database is
unreachable the cycle waits (3 s, doubling to 60 s) until it answers or the worker stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from sqlalchemy import Connection

from ..errors import DatabaseUnavailable
from ..job.executor import Executor, Prepared, Terms
from ..job.finishing import Finish, ring
from ..store.db import classify, retry_while_unavailable, run_in_transaction

log = logging.getLogger("cronjobs.worker.loop")

BATCH_WINDOW_SECONDS = 0.005  # with a backlog, wait this long at most for a bigger batch
STOPPING_RETRY_SECONDS = 1.0  # a stopping worker tries to write its last outcomes this often
T = TypeVar("T")

Wants = list[tuple[str, int]]  # (queue, rows to claim) per rung queue; all share one count
Claimed = list[tuple[dict, Terms]]  # claimed rows, each with its type's terms


class GroupCommit:
    """The plans not written yet and the transactions that write them with the next claim.
    Used by the pool's loop thread only.

    Args:
        executor: its `writer` writes, its `done` reports each written run; its worker id
            and `lease_seconds` go into the claim.
        slots: the worker's slots (with a backlog, a batch waits for half of them).
        stopped: set when the worker has stopped: waits for the database end.
        stopping: set when the worker stops taking rows: a wait for the database to claim
            (no outcome to write) ends then (default: `stopped`).
        timer: the monotonic clock of the batching window, seconds (default
            `time.monotonic`; tests give their own).
    """

    def __init__(self, executor: Executor, slots: int, stopped: threading.Event, *,
                 stopping: threading.Event | None = None,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self._executor = executor
        self._timer = timer
        self._engine = executor.app.engine
        self._clock = executor.app.clock
        self._stopped = stopped
        self._stopping = stopping or stopped
        self._min_batch = max(1, slots // 2)
        self._plans: list[Finish] = []
        self._since = 0.0  # timer() when the oldest waiting plan came
        self._backlog = False  # the last claim filled every free slot
        self._retry_at: float | None = None  # timer() when a held rate admits a start
        self.claims = 0  # claim statements (for tests and benchmarks)
        self.commits = 0  # transactions that wrote outcomes and/or claimed

    def add(self, plan: Finish) -> None:
        """Queue the planned end of a run for the next cycle."""
        if not self._plans:
            self._since = self._timer()
        self._plans.append(plan)

    @property
    def backlog(self) -> bool:
        """The last claim filled every slot it asked for (more rows may be due)."""
        return self._backlog

    def waiting(self) -> int:
        """Plans not written yet."""
        return len(self._plans)

    def holding(self, free: int, stopping: bool) -> bool:
        """True while the loop should wait for a bigger batch: a backlog, fewer than half
        the slots free, and the oldest plan younger than `BATCH_WINDOW_SECONDS`."""
        if not self._backlog or stopping or free >= self._min_batch:
            return False
        return bool(self._plans) and self._timer() - self._since < BATCH_WINDOW_SECONDS

    def window_left(self) -> float | None:
        """Seconds until the batching window of the waiting plans closes (0 when it has);
        None when no plan waits."""
        if not self._plans:
            return None
        return max(0.0, self._since + BATCH_WINDOW_SECONDS - self._timer())

    def retry_left(self) -> float | None:
        """Seconds until the last claim's held rows come free, when the claim policy told
        (a rate's next start: the loop claims again then); None when it did not."""
        if self._retry_at is None:
            return None
        return max(0.0, self._retry_at - self._timer())

    def cycle(self, wants: Wants) -> tuple[list[Prepared], set[str]]:
        """Write the waiting plans and claim rows for `wants`, in one transaction; then
        report each written run (`Executor.done`) and prepare each claimed row
        (`Executor.prepare`, with the terms the claim resolved once per type).

        Returns:
            `(prepared, drained)`: the claimed rows made ready to run (`Prepared`, claim
            order) and the queues that gave fewer rows than asked (nothing more is due
            there).

        Raises:
            What a claim alone raises (the database refused it): the loop cannot go on.
        """
        plans = self._plans
        self._retry_at = None  # the claim below tells again (no free slot: nothing to wait)
        if not plans and not wants:
            return [], set()
        self._plans = []
        released: list[tuple[int, str]] = []
        try:
            finals, rows, drained = self._retried(
                lambda: run_in_transaction(self._engine,
                                           lambda conn: self._transaction(conn, plans, wants,
                                                                          released)),
                bool(plans))
        except DatabaseUnavailable:  # stopping while the database is down
            if plans:
                log.error("%d outcome(s) not written (database unavailable while stopping); "
                          "their leases will expire and recover-stale takes them back",
                          len(plans))
            return [], set()
        except Exception as exc:
            if classify(exc) == "transient":  # deadlocks that persisted: try again soon
                log.error("writing outcomes and claiming jobs failed (%s: %.300s); trying "
                          "again in 1 s", type(exc).__name__, exc)
                self._plans = plans + self._plans
                self._stopped.wait(1.0)
                return [], set()
            written, rows, drained = self._apart(plans, wants)
        else:
            written = list(zip(plans, finals, strict=True))
            ring(self._executor.app, released)  # rows whose dependencies finished
        self.commits += 1
        for plan, final in written:
            self._executor.done(plan, final)
        self._backlog = bool(wants) and not drained
        return [self._executor.prepare(row, terms) for row, terms in rows], drained

    def _transaction(self, conn: Connection, plans: list[Finish], wants: Wants,
                     released: list[tuple[int, str]]) -> tuple[list[str], Claimed, set[str]]:
        released.clear()  # a transaction tried again: only the last one's count
        finals = self._executor.writer.write(conn, plans, released)
        rows, drained = self._claim(conn, wants)
        return finals, rows, drained

    def _claim(self, conn: Connection, wants: Wants) -> tuple[Claimed, set[str]]:
        """Claim up to the free slots from the rung queues, in turn; `now` is read inside
        the transaction, after any wait for a lock (SQLite). Each row comes with its
        type's terms."""
        rows: Claimed = []
        drained: set[str] = set()
        if self._stopping.is_set():  # a transaction retried after the stop: no new rows
            return rows, drained
        now: datetime = self._clock.now()
        free = wants[0][1] if wants else 0
        for queue, _ in wants:
            wanted = free - len(rows)
            if wanted <= 0:
                break
            claim = self._executor.claim_rows(conn, now, queue=queue, limit=wanted)
            self.claims += 1
            rows += [(row, claim.terms[row["type"]]) for row in claim.rows]
            # A short claim drains the queue, unless rows wait behind a limit, a block or
            # a pause that ends without a doorbell (`claim.held`): then it stays rung
            # (claimed again on the next turn of the loop, within a second, or when the
            # claim says they come free).
            if len(claim.rows) < wanted and not claim.held:
                drained.add(queue)
            elif len(claim.rows) < wanted and claim.retry_seconds is not None:
                at = self._timer() + claim.retry_seconds
                self._retry_at = at if self._retry_at is None else min(self._retry_at, at)
        return rows, drained

    def _retried(self, transaction: Callable[[], T], outcomes: bool) -> T:
        """`transaction()`, tried again while the database is unavailable (back-off from 3 s
        to 60 s). A claim alone is waited for only until the worker stops taking rows (a
        stopping worker claims nothing anyway); outcomes until it has stopped, and from
        the stop on every `STOPPING_RETRY_SECONDS`: a database back a moment after a
        SIGTERM gets them within the worker's last 15 s, instead of after the outage's
        back-off (up to 60 s), when their rows would have been run again.

        Raises:
            DatabaseUnavailable: still unavailable once the worker stopped (or, for a
                claim alone, stops taking rows).
        """
        what = "writing outcomes and claiming jobs"
        try:
            return retry_while_unavailable(transaction, what, give_up_seconds=None,
                                           stop=self._stopping)
        except DatabaseUnavailable:
            if not outcomes or self._stopped.is_set():
                raise
        return retry_while_unavailable(transaction, what, give_up_seconds=None,
                                       stop=self._stopped, first_seconds=STOPPING_RETRY_SECONDS,
                                       cap_seconds=STOPPING_RETRY_SECONDS)

    def _apart(self, plans: list[Finish], wants: Wants
               ) -> tuple[list[tuple[Finish, str]], Claimed, set[str]]:
        """The transaction was refused, or broke on something that is not a database
        error (`OutcomesFenced`: a run of the batch lost its row): write each outcome
        alone (only a refused one becomes `unrecordable`, only the lost run writes
        nothing), then claim alone. A claim that fails alone raises."""
        try:
            written = self._executor.writer.write_each(plans, give_up_seconds=None,
                                                       stop=self._stopped)
        except DatabaseUnavailable:  # stopping while the database is down
            log.error("outcomes not written (database unavailable while stopping); their "
                      "leases will expire and recover-stale takes them back")
            return [], [], set()
        try:
            rows, drained = retry_while_unavailable(
                lambda: run_in_transaction(self._engine, lambda conn: self._claim(conn, wants)),
                "claiming jobs", give_up_seconds=None, stop=self._stopping)
        except DatabaseUnavailable:  # stopping while the database is down
            return written, [], set()
        return written, rows, drained
