"""The task list and its kill switch: every registered task with its effective frequency,
its switch and its runtime row, as the scheduler, manual runs, the task rows of
`cronjobs tasks` and the dashboard, and the health checks see it.

A task is the handler of a scheduled type (`a.b.discover` -> task `a-b`); its frequency
comes from the database (`cronjob_runtime.frequency`), the settings (`[tasks.x]`) or the
handler's `FREQUENCY`, in that order; its switch lives in `cronjob_runtime.enabled`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from .. import store
from ..app import App, current
from ..config.sources import did_you_mean
from ..errors import ConfigError, HandlerNotFound
from ..store.db import run_in_transaction
from .deadline import starting_deadline
from .entries import entries, schedule_tasks
from .jitter import check_jitter, offset_seconds
from .pingin import ExternalTask, external_tasks
from .slots import Slot

log = logging.getLogger("cronjobs.schedule.scheduler")
_warned: set[str] = set()  # unknown [tasks.x] / [queues.x] lines already logged by this process

_TICK_COLUMNS = ("frequency", "enabled", "last_slot", "last_run_at", "last_job_id",
                 "last_skipped_slot", "buffered_slot")


@dataclass(frozen=True)
class TaskInfo:
    """A task as the scheduler sees it (merged from handler, settings and runtime row).

    Attributes:
        task: the task name (`http-uptime`).
        type: the type the scheduler starts (`http.uptime.discover`).
        handler: the handler class of `type`.
        frequency: the effective frequency (None: started by hand or by code only).
        enabled: the kill switch (`cronjob_runtime.enabled`).
        available: the handler's `available()` (False when it raised).
        runtime: the task's `cronjob_runtime` row (the columns read).
        timezone: the IANA zone its cron lines are read in (the settings' `timezone`
            unless the task has its own).
        schedule: the name of the `SCHEDULES` entry this task is (`<task>:<name>`), None
            for a handler's own task.
        payload: the entry's payload, under `slot` and `schedule` in each scheduled run's
            payload; None for a handler's own task.
        external: a task that runs elsewhere (`schedule.pingin`): its `handler` is the
            stand-in `ExternalTask`; never scheduled, its rows come from pings.
        starting_deadline: seconds after its slot a scheduled run may still start (its
            rows' `expires_at`); None: no deadline (`schedule.deadline`).
        jitter: JITTER, seconds (0: none): `[tasks.x] jitter`, else the handler's.
        spread: SPREAD: `[tasks.x] spread`, else the handler's.
        idle: the handler's `idle(app)` note: why the task has nothing to do now (the
            scheduler does not start its slots), None when it has work (or `idle` raised).

    A `SCHEDULES` entry (or one stored at run time) is a task of its own, `<task>:<name>`:
    its frequency is the entry's cron line, its zone the entry's (else the handler's
    `TIMEZONE`, else the settings'); `type` and `handler` are its handler's.
    """

    task: str
    type: str
    handler: type
    frequency: str | None
    enabled: bool
    available: bool
    runtime: dict
    timezone: str = "UTC"
    schedule: str | None = None
    payload: dict | None = None
    external: bool = False
    starting_deadline: float | None = None
    jitter: float = 0.0
    spread: bool = False
    idle: str | None = None


def task_infos(app: App, *, full: bool = True) -> list[TaskInfo]:
    """Every registered task and schedule entry (`<task>:<name>`) with its effective
    frequency, switch and availability.

    Creates the runtime row of a task seen for the first time (enabled unless the
    settings say otherwise or the handler is DESTRUCTIVE).

    Args:
        app: the App whose handlers and database to read.
        full: read every column of the runtime rows; False reads what a tick needs.

    Returns:
        A `TaskInfo` per registered task, sorted by task name.
    """
    registry = app.handlers
    columns = None if full else _TICK_COLUMNS
    with app.engine.connect() as conn:
        runtimes = store.list_runtimes(conn, columns)
        found = entries(app, conn)  # the stored entries: one statement
    external = external_tasks(app)
    known = {**schedule_tasks(app, found), **external}
    by_task = {e.entry_task: e for e in found}
    for line in unknown_sections(app):
        if line not in _warned:
            _warned.add(line)
            log.warning("%s", line)
    missing = [(task, job_type) for task, job_type in known.items() if task not in runtimes]
    if missing:  # tasks seen for the first time: one statement for all of them
        _add_runtimes(app, missing)
        with app.engine.connect() as conn:
            runtimes = store.list_runtimes(conn, columns)
    infos = []
    for task, job_type in known.items():
        cls = ExternalTask if task in external else registry.resolve_handler(job_type)
        runtime = runtimes[task]
        cfg = app.settings.task(task)
        zone, jitter, spread = _timing(app, cfg, cls)
        more = {"external": task in external, "jitter": jitter, "spread": spread,
                "starting_deadline": _deadline(cls, app, task), "idle": _idle(cls, app)}
        entry = by_task.get(task)
        if entry is not None:  # a SCHEDULES entry (or a stored one): a task of its own
            zone = entry.timezone or getattr(cls, "TIMEZONE", None) or app.settings.timezone
            infos.append(TaskInfo(task, job_type, cls, entry.cron, bool(runtime["enabled"]),
                                  _available(cls), runtime, zone, entry.name, entry.payload,
                                  **more))
            continue
        frequency = runtime["frequency"] or cfg.frequency or cls.FREQUENCY
        infos.append(TaskInfo(task, job_type, cls, frequency, bool(runtime["enabled"]),
                              _available(cls), runtime, zone, **more))
    return sorted(infos, key=lambda info: info.task) if external else infos


def run_at(info: TaskInfo, slot: Slot) -> datetime:
    """When the row of `info`'s slot `slot` may start: the slot's start plus the task's
    offset (`jitter.offset_seconds`: SPREAD within the period up to the next slot, and
    JITTER), naive UTC; the slot's start when the task has neither."""
    return slot_run_at(info.task, slot, jitter=info.jitter, spread=info.spread)


def slot_run_at(task: str, slot: Slot, *, jitter: float, spread: bool) -> datetime:
    """`run_at` from the task's name, JITTER (seconds) and SPREAD: naive UTC."""
    if not jitter and not spread:
        return slot.at
    period = (slot.next_at - slot.at).total_seconds()
    return slot.at + timedelta(seconds=offset_seconds(
        task, slot.key, jitter=jitter, spread=spread, period=period))


def _timing(app: App, cfg, cls: type) -> tuple[str, float, bool]:
    """`(timezone, jitter, spread)` of a task: each from `[tasks.x]` when set there, else
    the handler's constant, else the default (the settings' zone, no jitter, no spread).
    Both were checked when loaded."""
    zone = cfg.timezone or getattr(cls, "TIMEZONE", None) or app.settings.timezone
    jitter = cfg.jitter if cfg.jitter is not None else getattr(cls, "JITTER", None)
    spread = cfg.spread if cfg.spread is not None else getattr(cls, "SPREAD", False)
    return zone, check_jitter(jitter or 0), bool(spread)


def after_of(app: App) -> dict[str, str]:
    """`{task: the task it runs after}` for every registered task with an `AFTER` (the
    handler's, or `[tasks.<task>] after` in the settings, which wins; `""` there: none).

    Raises:
        ConfigError: one line: an AFTER naming no registered task (with a "did you mean"
            hint), naming its own task, or a cycle of AFTERs (`a -> b -> a`).
    """
    known = app.handlers.tasks()
    after: dict[str, str] = {}
    for task, job_type in known.items():
        cfg = app.settings.task(task).after
        value = cfg if cfg is not None else getattr(app.handlers.resolve_handler(job_type),
                                                    "AFTER", None)
        if not value:
            continue
        where = f"[tasks.{task}] after" if cfg is not None else f"{task}: AFTER"
        if not isinstance(value, str) or value not in known:
            raise ConfigError(f"{where} = {value!r} names no registered task"
                              f"{did_you_mean(str(value), sorted(known))}")
        if value == task:
            raise ConfigError(f"{where} = {value!r} names the task itself")
        after[task] = value
    for task in after:
        path, at = [task], after.get(task)
        while at is not None:
            if at in path:
                raise ConfigError(f"AFTER makes a cycle: {' -> '.join(path[path.index(at):])}"
                                  f" -> {at}; a task's slot would wait for itself")
            path.append(at)
            at = after.get(at)
    return after


def unknown_sections(app: App) -> list[str]:
    """The settings' `[tasks.x]` sections that name no registered task and `[queues.x]`
    sections that name no queue of a registered handler (nor the default queue), one
    warning line each, with a "did you mean" hint. A queue section is only warned of, not
    refused: rows dispatched with `queue="x"` by code still obey it."""
    tasks, queues = sorted(app.handlers.tasks()), app.queues()
    lines = [f"[tasks.{name}] in the settings names no registered task"
             f"{did_you_mean(name, tasks)} (tasks: {', '.join(tasks)})"
             for name in sorted(set(app.settings.tasks) - set(tasks) - set(external_tasks(app)))]
    lines += [f"[queues.{name}] in the settings names no queue of a registered handler"
              f"{did_you_mean(name, queues)} (queues: {', '.join(queues)}); its limits apply "
              f"only to rows dispatched to queue {name!r}"
              for name in sorted(set(app.settings.queues) - set(queues))]
    return lines


def _add_runtimes(app: App, missing: list[tuple[str, str]]) -> None:
    """Write the runtime rows of tasks seen for the first time (`(task, type)` pairs): the
    switch from the settings, else on unless the handler is DESTRUCTIVE."""
    new = []
    for task, job_type in missing:
        cls, cfg = app.handlers.resolve_handler(job_type), app.settings.task(task)
        enabled = cfg.enabled if cfg.enabled is not None else not getattr(cls, "DESTRUCTIVE",
                                                                           False)
        new.append((task, job_type, enabled))
    now = app.clock.now()
    run_in_transaction(app.engine, lambda c: store.ensure_runtimes(c, new, now))


def _deadline(cls: type, app: App, task: str) -> float | None:
    try:
        return starting_deadline(cls, app.settings.task(task).starting_deadline)
    except ValueError as exc:  # a class changed since registration: no deadline, said
        log.warning("task %s: %s", task, exc)
        return None


def _idle(cls: type, app: App) -> str | None:
    """The handler's `idle(app)` note (one line), None when it has work; an `idle` that
    raises counts as not idle (said at WARNING), so a broken check never stops a task."""
    idle = getattr(cls, "idle", None)
    if idle is None:
        return None
    try:
        note = idle(app)
    except Exception as exc:
        log.warning("%s.idle() raised %s: %s", cls.__name__, type(exc).__name__, exc)
        return None
    return str(note).strip().splitlines()[0][:300] if note and str(note).strip() else None


def _available(cls: type) -> bool:
    try:
        return bool(cls.available())
    except Exception as exc:  # a broken precondition check means "not available"
        log.warning("%s.available() raised %s: %s", cls.__name__, type(exc).__name__, exc)
        return False


def set_enabled(task: str, enabled: bool, *, app: App | None = None,
                who: str | None = None) -> None:
    """Flip the kill switch of `task` in `cronjob_runtime`.

    Args:
        task: a task name (`http-uptime`).
        enabled: True lets the scheduler start it; False makes every tick skip it
            (`disabled`) and refuses manual runs (an external task: its overdue check).
        who: who flipped it (`auth.who()`), named in an INFO log line
            (`task X disabled by ada`); None: no line.

    Raises:
        HandlerNotFound: no registered handler belongs to `task`, nor is it an
            external task (`schedule.pingin`).
    """
    app = app or current()
    if task not in schedule_tasks(app) and task not in external_tasks(app):
        raise HandlerNotFound(f"unknown task {task!r}")
    task_infos(app)
    run_in_transaction(app.engine, lambda c: store.set_enabled(c, task, enabled, app.clock.now()))
    if who is not None:
        log.info("task %s %s by %s", task, "enabled" if enabled else "disabled", who)
