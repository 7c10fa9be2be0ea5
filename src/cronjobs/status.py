"""The words of a job row: its `Status`, what writing a run's end can give besides one
(`Ended`), and the machine-readable `Reason` of an outcome the worker decided.

Python compares with these enums; SQL text may keep the literal values. They are
`StrEnum`s, so a member is the string itself: it binds as a SQL parameter, compares equal
to the value read back from a row and serialises to JSON as the plain value.

Other words that look alike are not these: an `outcome.Outcome`'s `kind` (`fatal`,
`retry_later`, `cut_off` ... decide a `Status`), a worker's heartbeat status (`running`,
`stopping`) and a bulk operation's status (`running`, `done`, `failed`).
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """The `status` column of `cronjob_queue` (and of `cronjob_runtime.last_status`).

    `pending` waits to be claimed (due when `scheduled_at` has passed or is empty);
    `waiting` waits for the rows it depends on (`depends_on`) to finish, and is never
    claimed: the transaction that finishes its last dependency makes it `pending` (or
    `cancelled`, for a failed dependency); `running` is held by one run under a lease;
    `completed`, `failed` and `cancelled` are final (a failed row may be retried by an
    operator).
    """

    PENDING = "pending"
    WAITING = "waiting"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


FINAL = (Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.EXPIRED)
UNFINISHED = (Status.PENDING, Status.WAITING, Status.RUNNING)


class Ended(StrEnum):
    """What writing the end of a run can give besides a `Status`; never a row's `status`.

    `deleted`: the run was cancelled and the row, without children, was deleted (also
    written to `cronjob_runtime.last_status` for a task's run); `lost`: the run no longer
    held the row (its lease was taken by recover-stale), so nothing was written.
    """

    DELETED = "deleted"
    LOST = "lost"


class Reason(StrEnum):
    """Why a run ended as it did when the worker, not the handler, decided it: the
    `outcome_reason` column (NULL for the handler's own outcome). The part before the dot
    is the family (`family()`): metrics count a timeout by its family, whatever stopped it.
    """

    TIMEOUT_ALARM = "timeout.alarm"  # the job process's alarm stopped the handler
    TIMEOUT_KILLED = "timeout.killed"  # no answer past MAX_RUNTIME + grace: SIGKILL
    TIMEOUT_ABANDONED = "timeout.abandoned"  # a thread job given up; the worker recycles
    PROCESS_DIED = "process_died"  # the job process ended during the job
    CUT_OFF_SHUTDOWN = "cut_off.shutdown"  # a stopping worker: attempt given back
    CUT_OFF_RECYCLE = "cut_off.recycle"  # a recycling worker: attempt used
    NOT_STARTED = "not_started"  # the job could not start (dead idle process, database)
    DISABLED = "disabled"  # a destructive task switched off: not run
    UNRECORDABLE_RESULT = "unrecordable.result"  # a result that cannot be sent or stored
    UNRECORDABLE_REFUSED = "unrecordable.refused"  # the database refused the write
    UNREADABLE_ROW = "unreadable.row"  # a stored row that cannot be decoded or sent
    UNREADABLE_ANSWER = "unreadable.answer"  # a job process's answer that cannot be trusted
    NO_HANDLER = "no_handler"  # no handler for the type on this worker
    INVALID_RETURN = "invalid_return"  # handle() returned something it may not
    LEASE_EXPIRED = "lease_expired"  # recover-stale took the row of a lost worker
    STOPPED = "stopped"  # an operator stopped the running job (dashboard Stop, `cronjobs stop`)
    FAMILY_CANCELLED = "cancelled.family"  # an operator cancelled the row's whole family
    DEPENDENCY_FAILED = "dependency_failed"  # a row it depends on failed: cancelled, not run
    EXPIRED = "expired"  # not started by its `expires_at`: ended `expired`, not run


def family(reason: str | None) -> str | None:
    """The family of a stored reason (`timeout.killed` -> `timeout`); None for None. A
    reason this version does not know keeps its own family (read, never refused)."""
    return None if reason is None else reason.split(".", 1)[0]
