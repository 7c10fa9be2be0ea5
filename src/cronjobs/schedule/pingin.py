"""Pings in: a job that lives elsewhere (a system crontab, another codebase) tells when it
starts, succeeds or fails (`POST /api/ping/<task>[/start|/fail]`, `cronjobs ping TASK`),
and its run is recorded as a row of its task (`store.pingruns`), so it gets the same
history, `last_run_at` / `last_status` / `last_success_at`, overdue check and alerts as
a scheduled run.

The task is a registered one, or an **external task**: a `[tasks.<task>]` section of the
settings that names no registered handler but gives a `frequency`
(`[tasks.nightly-backup] frequency = "0 3 * * *"`). An external task is listed with the
others (`task_infos`, with `ExternalTask` as its stand-in handler) and checked for being
overdue, is not warned of as unknown, and is never scheduled nor run by hand (it has no
handler here): its rows come only from its pings.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import limits
from ..app import App
from ..errors import HandlerNotFound
from ..handler import CronJobHandler
from ..store.db import run_in_transaction
from ..store.pingruns import PING_KINDS, record_ping

__all__ = ["PING_KINDS", "PING_TEXT_MAX_BYTES", "ExternalTask", "PingRun", "external_tasks",
           "ping", "ping_type"]

PING_TEXT_MAX_BYTES = limits.ERROR_MAX_BYTES  # a ping's text beyond is cut with a marker


class ExternalTask(CronJobHandler):
    """The stand-in handler of an external task in the task list: it has no `TYPE`, is
    never registered and never runs (a row of its type that somehow became due fails as
    "no handler")."""

    def handle(self, payload: dict, job) -> bool:
        """Never called: an external task's rows come from its pings only."""
        raise RuntimeError("an external task runs elsewhere; its rows come from pings")


@dataclass(frozen=True)
class PingRun:
    """A recorded ping: the row it wrote (`id`) and the row's status (`running`,
    `completed`, `failed`)."""

    id: int
    status: str


def external_tasks(app: App) -> dict[str, str]:
    """`{task: type}` of the settings' `[tasks.<task>]` sections that name no registered
    task and give a `frequency`: tasks whose runs are recorded from pings only. Their
    type is `<task>.execute`."""
    known = app.handlers.tasks()
    return {name: f"{name}.execute" for name, cfg in sorted(app.settings.tasks.items())
            if name not in known and cfg.frequency}


def ping_type(app: App, task: str) -> str:
    """The type of the rows a ping of `task` writes: the registered task's scheduled
    type, or an external task's `<task>.execute`.

    Raises:
        HandlerNotFound: `task` is neither registered nor an external task.
    """
    known = app.handlers.tasks()
    if task in known:
        return known[task]
    external = external_tasks(app)
    if task in external:
        return external[task]
    raise HandlerNotFound(f"unknown task {task!r}: neither registered nor declared in the "
                          f"settings as [tasks.{task}] with a frequency")


def ping(app: App, task: str, kind: str = "success", text: str | None = None) -> PingRun:
    """Record ping `kind` of `task` at `app.clock`'s now (`store.pingruns.record_ping`):
    `start` opens a `running` row; `success` / `fail` end the open one, or write a
    finished one when none is open.

    Args:
        app: the App whose database to write.
        task: a registered or external task name.
        kind: `start`, `success` (the default) or `fail`.
        text: the run's output or error (optional), cut to `PING_TEXT_MAX_BYTES`.

    Returns:
        The `PingRun` written.

    Raises:
        HandlerNotFound: an unknown task (`ping_type`).
        ValueError: `kind` is none of `PING_KINDS`.
    """
    if kind not in PING_KINDS:
        raise ValueError(f"ping kind must be one of {', '.join(PING_KINDS)}, got {kind!r}")
    job_type = ping_type(app, task)
    if text is not None:
        text = limits.cut(text, PING_TEXT_MAX_BYTES)
    job_id, status = run_in_transaction(app.engine, lambda conn: record_ping(
        conn, task, job_type, kind, text, app.clock.now()))
    return PingRun(job_id, status)
