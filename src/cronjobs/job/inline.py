"""Run one row here, in the calling thread: `cronjobs run ID`, `queue.process` and
`cronjobs.testing.drain`.

`InlineRunner` claims a row, calls its handler and writes its outcome with the pieces of
an `Executor` (`claim_rows`, `terms`, `prepare`, `done`, `writer`), the same pieces the
worker's pool uses; what differs is only where the handler runs (here, not in a job
process or a worker thread) and that each outcome is written in a transaction of its own
(the pool's group commit batches them)."""

from __future__ import annotations

import logging
import time

from .. import store
from ..errors import JobNotFound, JobStateError
from ..handler import Job
from ..store.db import run_in_transaction
from ..store.expiry import deadline_text
from .executor import Executor, JobReport, Terms, call_handler
from .expiry import expire
from .outcome import Outcome

log = logging.getLogger("cronjobs.worker.loop")

__all__ = ["InlineRunner"]


class InlineRunner:
    """Runs rows one at a time in the calling thread, with `executor`'s handlers, worker
    id, runtime, flow control and leases (a row's lease is renewed only by a caller that
    runs `executor.renew_leases`; a run shorter than its lease needs none).

    Args:
        executor: the `Executor` whose pieces claim, prepare and finish the rows.
    """

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def claim(self, queue: str) -> dict | None:
        """Claim the best due row of `queue` (status `running`, lease set); None when
        nothing is due.

        Raises:
            DatabaseUnavailable, DatabaseRefused, StoreError: see `run_in_transaction`.
        """
        executor = self.executor
        # `now` is read inside the transaction, after any wait for a lock (SQLite).
        rows = run_in_transaction(executor.app.engine, lambda c: executor.claim_rows(
            c, executor.app.clock.now(), queue=queue).rows)
        return rows[0] if rows else None

    def run_next(self, queue: str) -> JobReport | None:
        """Claim the best due row of `queue` and run it here; None when nothing is due.

        Returns:
            The row's `JobReport`, or None.
        """
        row = self.claim(queue)
        return None if row is None else self.run_claimed(row)

    def run_id(self, job_id: int) -> JobReport:
        """Claim row `job_id` (pending, due or not) and run it here and now.

        Returns:
            The row's `JobReport`.

        Raises:
            JobNotFound: no such row.
            JobStateError: the row is not `pending`, or a pause, a block or a limit holds
                it, or its `expires_at` has passed (it is ended `expired` then).
        """
        executor = self.executor
        app = executor.app
        claim = run_in_transaction(app.engine, lambda c: executor.claim_rows(
            c, app.clock.now(), job_id=job_id))
        if not claim.rows:
            with app.engine.connect() as conn:
                current = store.get_job(conn, job_id, ["status", "queue", "expires_at"])
            if current is None:
                raise JobNotFound(f"no job with id {job_id}")
            deadline = current["expires_at"]
            if current["status"] == "pending" and deadline and deadline <= app.clock.now():
                expire(app, [current["queue"]])
                raise JobStateError(f"job {job_id} was {deadline_text(deadline)}: it ended "
                                    f"expired, not run")
            if current["status"] == "pending":
                raise JobStateError(f"job {job_id} is held by a pause, a block or a limit "
                                    f"(see `cronjobs limits`); it stays pending")
            raise JobStateError(f"job {job_id} is {current['status']}, not pending")
        return self.run_claimed(claim.rows[0], claim.terms[claim.rows[0]["type"]])

    def run_claimed(self, row: dict, terms: Terms | None = None) -> JobReport:
        """Run a row this process has claimed (status `running`) here, and finish it.

        Args:
            row: the claimed row (as the claim returned it).
            terms: its type's `Terms` when the claim gave them (`Claim.terms`); else
                resolved here (`Executor.terms`).

        Returns:
            The row's `JobReport`.
        """
        executor = self.executor
        ready = executor.prepare(row, terms or executor.terms(row["type"]))
        job, outcome = ready.job, ready.instant
        log.debug("job %s start type=%s attempt=%s/%s", job.id, job.type, job.attempts,
                  job.max_attempts or "—", extra={"trace_id": job.id})
        started = time.monotonic()
        if outcome is None:
            try:
                outcome = call_handler(executor.app, job, executor.runtime,
                                       cls=ready.terms.cls)
            finally:
                executor.untrack(job.id)
        return self.finish(job, outcome, (time.monotonic() - started) * 1000)

    def finish(self, job: Job, outcome: Outcome, duration_ms: float) -> JobReport:
        """Write `outcome` for the run `job` in a transaction of its own and report it
        (`OutcomeWriter.write_each`: retried for up to 10 minutes while the database is
        unreachable; a write the database refuses is replaced by an `unrecordable` one).
        `duration_ms`: how long the handler ran, milliseconds.

        Returns:
            The row's `JobReport` (`Executor.done`).

        Raises:
            DatabaseUnavailable: the database stayed down for 10 minutes (the row stays
                `running` until its lease expires and recover-stale takes it back).
            DatabaseRefused: the database refused even the `unrecordable` write.
        """
        executor = self.executor
        [(plan, final)] = executor.writer.write_each([executor.plan(job, outcome, duration_ms)])
        return executor.done(plan, final)
