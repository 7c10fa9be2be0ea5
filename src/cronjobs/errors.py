"""The cronjobs error tree: every error the library raises derives from `CronjobsError`."""

from __future__ import annotations


class CronjobsError(Exception):
    """Root of every error raised by cronjobs."""


class ConfigError(CronjobsError):
    """A setting is missing, unknown or has a value that cannot be used."""


class HandlerError(CronjobsError):
    """A handler class is malformed (bad or missing `TYPE`, bad `FREQUENCY`, ...)."""


class DuplicateHandlerType(HandlerError):
    """Two handler classes declare the same `TYPE`."""


class HandlerNotFound(CronjobsError):
    """No handler class is registered for a job type or task name."""


class InvalidJob(CronjobsError):
    """A dispatch was refused: payload not JSON, title too long, negative attempts, ..."""


class InvalidCallbackUrl(InvalidJob, ValueError):
    """A dispatch's `callback_url` is not an http(s) URL with a host within 2,048 characters."""


class JobNotFound(CronjobsError):
    """No row in `cronjob_queue` has the given id."""


class JobStateError(CronjobsError):
    """A row is not in the state an operation needs (e.g. `run` on a completed row)."""


class StoreError(CronjobsError):
    """The database failed in a way retrying did not fix."""


class DatabaseUnavailable(StoreError):
    """The database cannot be reached (connection refused or lost, server restarting).

    Worth waiting for: the worker backs off (3 s, doubling to 60 s) and tries again."""


class DatabaseRefused(StoreError):
    """The database refused a statement for its content or the schema (value too long,
    bad value, missing table, constraint). Retrying cannot help; never treated as an outage.

    The message holds the driver's text only, never the SQL."""


class OutcomesFenced(CronjobsError):
    """A batch of outcomes (`store.finish_many`) met a run that no longer holds its row:
    its one UPDATE took fewer rows than it was given and cannot say which. Not a database
    error: the caller rolls its transaction back and writes the outcomes one by one
    (`store.finish_job`), which tells the lost run apart."""


class TaskRefused(CronjobsError):
    """A manual run was refused: the task is disabled or its handler is unavailable."""


class ManualRunPending(JobStateError):
    """A manual run of the task is still pending; another needs `again=True` (`--again`).

    Attributes:
        job_id: the id of the pending manual run.
    """

    def __init__(self, message: str, job_id: int) -> None:
        super().__init__(message)
        self.job_id = job_id


class TaskRunning(JobStateError):
    """The task's last scheduled run (or a row of its family) is still pending or running
    and its OVERLAP is `skip`; a manual run needs `force=True` (`--force`).

    Attributes:
        job_id: the id of that run (the family's first row).
    """

    def __init__(self, message: str, job_id: int) -> None:
        super().__init__(message)
        self.job_id = job_id


class OperationRunning(JobStateError):
    """A bulk operation of the same selection is running: a second one is refused.

    Attributes:
        operation: the running operation's row (`id`, `action`, `selection`, `total_rows`,
            `done_rows`, `created_by`, `created_host`, ...).
    """

    def __init__(self, operation: dict) -> None:
        super().__init__(
            f"a {operation['action']} of this selection is already running (operation "
            f"{operation['id']}, {operation['done_rows']:,} of {operation['total_rows']:,} "
            f"done, started by {operation['created_by']} on {operation['created_host']})")
        self.operation = operation


class SelectionTooLarge(CronjobsError):
    """A bulk operation was refused: its selection has more rows than a snapshot may hold.

    Attributes:
        limit: the most rows a snapshot may hold.
    """

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class OperationNotRunning(JobStateError):
    """A stalled operation was to be resumed, but it is done, failed or does not exist."""


class BackfillRefused(CronjobsError):
    """A backfill was refused: its range is reversed or too long, or the task has no
    frequency (`cronjobs.schedule.backfill`)."""


_NO_TABLE = ("no such table", "doesn't exist", "does not exist")


def migrate_first(detail: str = "") -> str:
    """What to tell a person whose database has no cronjobs tables (`detail`: the driver's
    text, shown in parentheses when given)."""
    return (f"the database has no cronjobs tables{f' ({detail})' if detail else ''}; "
            f"run `cronjobs migrate`")


def names_missing_table(text: str) -> bool:
    """Whether a driver's error `text` says one of our tables is missing (SQLite's "no such
    table: cronjob_queue", MariaDB's "Table 'db.cronjob_queue' doesn't exist",
    PostgreSQL's 'relation "cronjob_queue" does not exist'): a database never migrated."""
    return "cronjob" in text and any(s in text for s in _NO_TABLE)


class TokenError(CronjobsError):
    """An API token refused: a bad name or scope, a name taken, or no such token."""


class ScheduleExists(InvalidJob):
    """A schedule entry of that task and name exists already (stored, or in the handler's
    SCHEDULES): the HTTP API answers 409."""
