"""Manual runs of a task: the dashboard's Run now and `cronjobs tasks run TASK`, one code path.

A manual run dispatches the task's scheduled type at priority 1 with the idempotency key
`cronjobs:<task>:manual:<request token>`. The request token is what makes "one request,
one row" hold:

- The dashboard renders a fresh token into each Run now form. A double click (or a
  browser re-sending the POST) carries the same token, so the database's unique key
  returns the first row. Pressing the button again after the page was loaded again is a
  new token: a deliberate second click is a second row (the dashboard passes
  `again=True`, because a person who presses a button they can see means it).
- The CLI has no page to carry a token between two commands, so each command is a new
  request with a token of its own, and `again=False`: while a manual run of the task is
  still `pending`, a second `cronjobs tasks run TASK` is refused naming that row's id
  (a command repeated within milliseconds is nearly always a mistake); `--again` starts
  another. The check and the insert happen under a lock on the task's runtime row, so
  two commands at the same moment cannot both pass it.

A manual run never claims or moves the scheduled slot: only `last_manual_at` and
`last_manual_job_id` of the runtime row change, and the next slot runs as planned.

Under `OVERLAP = "skip"` a manual run is refused while the task's last scheduled run (or
any row of its family) is still pending or running: "already running (job N)", unless
`force` (`--force`, the dashboard's confirm step); a forced run is logged at WARNING.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from typing import Any

from .. import limits, store
from ..app import App, current
from ..errors import HandlerNotFound, InvalidJob, ManualRunPending, TaskRefused, TaskRunning
from ..handler import stage_of
from ..job import dispatching
from ..status import Status
from ..store.db import run_in_transaction
from . import overlap
from .entries import schedule_tasks
from .tasks import task_infos

log = logging.getLogger("cronjobs.schedule.manual")

MANUAL_PRIORITY = 1
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


@dataclass(frozen=True)
class ManualRun:
    """The answer of `run_now`.

    Attributes:
        id: the row of this request (new, or the one an earlier send of the same
            request token made).
        created: False when the request token had already made `id`.
    """

    id: int
    created: bool


def new_request_token() -> str:
    """A fresh request token (32 hex characters)."""
    return uuid.uuid4().hex


def run_now(task: str, *, request_token: str | None = None, again: bool = False,
            payload: dict | None = None, force: bool = False,
            app: App | None = None, who: str | None = None) -> ManualRun:
    """Start a manual run of `task` now (its scheduled type, priority 1).

    Args:
        task: a task name (`http-uptime`).
        request_token: 8-64 characters `[A-Za-z0-9_-]` naming this request; the same
            token always gives the same row. None: a new token (a new request).
        again: also start a run while an earlier manual run of `task` is still pending.
        payload: keys for the row's payload (a JSON object within the payload limits of
            `cronjobs.limits`); the row's payload is this with `"manual": True` added (the
            marker always wins, so the run is still a task run). None: `{"manual": True}`.
            A schedule entry's task (`<task>:<name>`): over the entry's payload and
            `"schedule": name`.
        force: start the run even while the task's scheduled run is still going under
            `OVERLAP = "skip"` (logged at WARNING).
        who: who pressed Run now (`auth.who()`), named in the new row's process log and
            the log line; None: nobody is named.

    Returns:
        A `ManualRun`.

    Raises:
        HandlerNotFound: no registered handler belongs to `task`.
        TaskRefused: the task is disabled, or its handler is not available.
        ManualRunPending: `again` is False and a manual run of `task` is still pending
            (its id is in the message and in `.job_id`).
        TaskRunning: `force` is False, the task's OVERLAP is `skip` and its last scheduled
            run or a row of its family is pending or running ("already running (job N)";
            N, the run's id, is also in `.job_id`).
        InvalidJob: a malformed request token; a payload that is not a dict, nested too
            deep or too large (nothing is dispatched).
    """
    app = app or current()
    token = request_token or new_request_token()
    info = _runnable(app, task, token, payload)
    base = {} if info.schedule is None else {**(info.payload or {}), "schedule": info.schedule}
    values = dispatching.build_row(app, info.type, {**base, **(payload or {}), "manual": True},
                                   priority=MANUAL_PRIORITY, title=f"{task} (manual)",
                                   idempotency_key=f"cronjobs:{task}:manual:{token}")
    values.update(_started_by(app, who))
    skip = overlap.policy_of(info.handler) == "skip"
    job_id, created = run_in_transaction(
        app.engine, lambda conn: _start(conn, app, task, values, again, skip and not force))
    if created:
        _started(app, task, job_id, values["queue"], who, forced=skip and force)
    return ManualRun(job_id, created)


def _started_by(app: App, who: str | None) -> dict:
    """The new row's first process-log line naming `who`, as values (none without)."""
    if who is None:
        return {}
    stamp = f"{app.clock.now():%Y-%m-%d %H:%M:%S}"
    return {"process_logs": limits.log_line(f"[{stamp}] started by {who} (Run now)") + "\n"}


def _started(app: App, task: str, job_id: int, queue: str, who: str | None,
             forced: bool) -> None:
    """Log the new manual run of `task` (a forced one at WARNING too) and send it."""
    if forced:
        log.warning("task %s: manual run forced (job %s) while its scheduled run is still "
                    "going", task, job_id, extra={"trace_id": job_id})
    log.info("task %s: manual run started as job %s%s", task, job_id,
             f" by {who}" if who else "", extra={"trace_id": job_id})
    dispatching.send(app, job_id, queue)


def _runnable(app: App, task: str, token: Any, payload: Any) -> Any:
    """The `TaskInfo` of `task` once the request is found acceptable (see `run_now`'s
    Raises)."""
    if not isinstance(token, str) or not _TOKEN.match(token):
        raise InvalidJob(f"request token must be 8 to 64 letters, digits, '-' or '_', "
                         f"got {token!r:.80}")
    if task not in schedule_tasks(app):  # before task_infos(), which writes runtime rows
        raise HandlerNotFound(f"unknown task {task!r}; see `cronjobs tasks`")
    info = next(i for i in task_infos(app) if i.task == task)
    if not info.available:
        raise TaskRefused(f"task {task!r} is not available (module not installed): "
                          f"{info.type}.available() is False")
    if not info.enabled:
        raise TaskRefused(f"task {task!r} is disabled; enable it first "
                          f"(`cronjobs tasks enable {task}` or the dashboard's switch)")
    if payload is not None and not isinstance(payload, dict):
        raise InvalidJob(f"payload must be a JSON object (dict), got "
                         f"{payload.__class__.__name__}: {payload!r:.80}")
    return info


def _start(conn, app: App, task: str, values: dict, again: bool,
           refuse_running: bool) -> tuple[int, bool]:
    """In one transaction, under the lock of the task's runtime row: the row of this
    request (new, or the one its key already made), refused while another manual run is
    pending unless `again`, and while the last scheduled run's family is still going
    when `refuse_running`."""
    runtime = store.lock_runtime(conn, task)
    existing = store.select_by_key(conn, values["idempotency_key"])
    if existing is not None:
        return existing["id"], False
    last = runtime["last_manual_job_id"] if runtime else None
    if not again and last is not None:
        row = store.get_job(conn, last, ["status"])
        if row is not None and row["status"] == Status.PENDING:
            raise ManualRunPending(f"a manual run of task {task!r} is already pending: job "
                                   f"{last} (use --again to start another)", last)
    root = runtime["last_job_id"] if runtime else None
    family = [root] if stage_of(values["type"]) == "discover" else []
    if refuse_running and root is not None and store.live_in_families(conn, [root], family):
        raise TaskRunning(f"task {task!r} is already running (job {root}); its OVERLAP is "
                          f"'skip' (use --force to start another)", root)
    row, created = dispatching.insert_row(conn, values)
    if created:
        store.record_run(conn, task, slot=None, job_id=row["id"], now=app.clock.now(),
                         next_run_at=None)
    return row["id"], created
