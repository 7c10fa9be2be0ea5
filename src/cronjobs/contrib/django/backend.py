"""`CronjobsBackend`: Django's Tasks framework backed by `cronjob_queue`.

`enqueue` checks the task (`validate_task`) and builds the row as `queue.dispatch` does
(`job.rows.build_row`: type `django.task.execute`, the priority, `run_after` as `scheduled_at`,
`queue_name` as the queue, the task's name as the title), inserts it through Django's
connection in the caller's transaction, and rings the broker in `transaction.on_commit`:
a rolled-back `atomic()` leaves no row and sends nothing. `get_result` reads the row.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from ... import limits
from ...errors import InvalidJob
from ...job import dispatching
from ...job.rows import build_row
from ...status import Status
from ...store import borrowed
from . import connect
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from .handler import TYPE

# A row's status as Django's Tasks framework names it.
STATUSES = {
    Status.PENDING: TaskResultStatus.READY, Status.WAITING: TaskResultStatus.READY,
    Status.RUNNING: TaskResultStatus.RUNNING, Status.COMPLETED: TaskResultStatus.SUCCESSFUL,
    Status.FAILED: TaskResultStatus.FAILED, Status.CANCELLED: TaskResultStatus.FAILED,
    Status.EXPIRED: TaskResultStatus.FAILED,
}
DEFAULT_PRIORITY = 5  # cronjobs' default; lower runs first, Django's higher runs first
_KEPT = {"task", "id", "args", "kwargs", "backend"}  # what a refresh leaves alone
_ID = re.compile(r"[1-9][0-9]{0,17}")  # a row id (BIGINT), as `enqueue` gives it
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CronjobsTaskResult(TaskResult):
    """A `TaskResult` read from a `cronjob_queue` row: `return_value` is the stored
    result's `return_value` (raises ValueError while the task has not succeeded, as
    Django's does); `refresh()` reads the row again."""

    stored_return_value: Any = None

    @property
    def return_value(self) -> Any:
        """The task's return value (JSON). Raises ValueError unless SUCCESSFUL."""
        if self.status == TaskResultStatus.SUCCESSFUL:
            return self.stored_return_value
        if self.status == TaskResultStatus.FAILED:
            raise ValueError("Task failed")
        raise ValueError("Task has not finished yet")

    def refresh(self) -> None:
        """Read the row again (status, times, errors, return value)."""
        fresh = self.task.get_backend().get_result(self.id)
        for field in dataclasses.fields(fresh):
            if field.name not in _KEPT:
                object.__setattr__(self, field.name, getattr(fresh, field.name))


class CronjobsBackend(BaseTaskBackend):
    """A backend of Django's Tasks framework that runs tasks in cronjobs workers.

    Settings: `TASKS = {"default": {"BACKEND": "cronjobs.contrib.django.CronjobsBackend",
    "QUEUES": [...], "OPTIONS": {"DATABASE": "default", "MAX_ATTEMPTS": 3}}}`;
    `DATABASE` is the `DATABASES` alias the rows are written through (default
    `CRONJOBS_DATABASE`, else "default"), in the caller's transaction on that
    connection; `MAX_ATTEMPTS` the attempts of each row (default the handler's, 3).
    """

    supports_defer = True
    supports_get_result = True
    supports_priority = True
    supports_async_task = False

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        self.database = self.options.get("DATABASE")

    def enqueue(self, task, args, kwargs) -> CronjobsTaskResult:
        """Write the task's row in the current transaction of the backend's database and
        ring its queue once that commits. Returns a READY result whose id is the row id.

        Raises:
            InvalidTask: the task is not valid for this backend (priority, queue,
                run_after, ...), its arguments are not JSON, or OPTIONS["MAX_ATTEMPTS"]
                is not an integer >= 1.
        """
        self.validate_task(task)
        app = connect.get_app()
        result = self.result_from_row(task, None, args, kwargs)  # args and kwargs as JSON
        payload = {"task": task.module_path, "args": result.args, "kwargs": result.kwargs,
                   "takes_context": task.takes_context}
        try:
            values = build_row(app, TYPE, payload, priority=DEFAULT_PRIORITY - task.priority,
                               scheduled_at=_utc(task.run_after), queue=task.queue_name,
                               title=task.name[:limits.TITLE_MAX_CHARS],
                               max_attempts=self.options.get("MAX_ATTEMPTS"))
        except InvalidJob as exc:
            raise InvalidTask(str(exc)) from None
        using = self.database or connect.alias()
        job_id = borrowed.insert_row(connections[using], values)
        queue, when = values["queue"], values["scheduled_at"]
        transaction.on_commit(
            lambda: dispatching.send(app, job_id, queue, dispatching.delay(app, when)),
            using=using)
        object.__setattr__(result, "id", str(job_id))
        object.__setattr__(result, "enqueued_at", _aware(values["created_at"]))
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> CronjobsTaskResult:
        """The result of the row `result_id`, read now.

        Raises:
            TaskResultDoesNotExist: no row of a Django task has that id.
        """
        row = None
        if _ID.fullmatch(str(result_id)):
            row = borrowed.read_row(connections[self.database or connect.alias()], int(result_id))
        if row is None or row["type"] != TYPE:
            raise TaskResultDoesNotExist(result_id)
        payload = json.loads(row["payload"])
        task = import_string(payload["task"])
        if task.backend != self.alias:
            task = task.using(backend=self.alias)
        return self.result_from_row(task, row, payload["args"], payload["kwargs"])

    def result_from_row(self, task, row: dict | None, args, kwargs) -> CronjobsTaskResult:
        """A `TaskResult` of `task` from a row's columns (`store.borrowed.COLUMNS`; None: a new,
        READY result without an id) and the task's arguments.

        Raises:
            InvalidTask: an argument is not JSON.
        """
        try:
            result = CronjobsTaskResult(
                task=task, id=str(row["id"]) if row else "", backend=self.alias,
                status=STATUSES[row["status"]] if row else TaskResultStatus.READY,
                enqueued_at=_aware(row and row["created_at"]),
                started_at=_aware(row and row["started_at"]),
                finished_at=_aware(row and row["finished_at"]),
                last_attempted_at=_aware(row and row["started_at"]),
                args=list(args), kwargs=dict(kwargs), errors=_errors(row),
                worker_ids=[(row and row["worker_id"]) or ""] * (row["attempts"] if row else 0))
        except TypeError as exc:  # normalize_json: an argument that is not JSON
            raise InvalidTask(f"task arguments must be JSON: {exc}") from None
        if row and row["result_payload"]:
            value = json.loads(row["result_payload"]).get("return_value")
            object.__setattr__(result, "stored_return_value", value)
        return result


def _errors(row: dict | None) -> list:
    """The row's error as Django's `TaskError` (exception class path, traceback)."""
    if not row or row["status"] not in (Status.FAILED, Status.CANCELLED, Status.EXPIRED):
        return []
    text = row["traceback"] or row["error"] or ""
    last = text.strip().splitlines()[-1] if text.strip() else ""
    found = _EXCEPTION.match(last)
    path = found.group(1) if found else "builtins.Exception"
    if "." not in path:
        path = f"builtins.{path}"
    return [TaskError(exception_class_path=path, traceback=text)]


def _utc(value: datetime | None) -> datetime | None:
    """`run_after` as naive UTC (a naive time is in Django's TIME_ZONE)."""
    if value is None:
        return None
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_default_timezone())
    return value.astimezone(UTC).replace(tzinfo=None)


def _aware(value: datetime | None) -> datetime | None:
    """A naive UTC time as Django's settings want it (aware under USE_TZ)."""
    if not value:
        return None
    return value.replace(tzinfo=UTC) if settings.USE_TZ else value
