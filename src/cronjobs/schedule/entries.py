"""Schedule entries of an App: the handlers' `SCHEDULES` and the entries stored at run
time (`cronjob_schedule`), each a task `<task>:<name>` of its own.

`entries(app)` reads the stored ones in one statement (a tick over a thousand entries
reads them once); `schedule_tasks(app)` is every schedulable task (the handlers' own and
the entries') mapped to the type it starts. `add`, `update`, `remove`, `pause` and
`resume` are what `cronjobs schedules`, the dashboard's Schedules section and the API do.
Pausing an entry is the flow pause of its task (`cronjobs pause --task <task>:<name>`).
"""

from __future__ import annotations

import json

from .. import store
from ..app import App
from ..errors import HandlerNotFound, InvalidJob, ScheduleExists
from ..store.db import run_in_transaction
from .entry import (
    Entry,
    check_entry,
    check_schedules,
    entry_task,
    payload_text,
    split_task,
)
from .slots import current_slot

SOURCES = ("code", "database")


def code_entries(app: App) -> list[Entry]:
    """The entries of the registered handlers' `SCHEDULES` (the class of the type each
    task starts), sorted by task then as written."""
    found = []
    for task, job_type in app.handlers.tasks().items():
        cls = app.handlers.resolve_handler(job_type)
        if getattr(cls, "SCHEDULES", None) is not None:
            found += [e for e in _checked(cls) if e.task == task]
    return found


_checked_cache: dict[type, tuple[object, list[Entry]]] = {}


def _checked(cls: type) -> list[Entry]:
    """`check_schedules(cls)`, once per class and `SCHEDULES` object (a tick over many
    entries does not check every cron line again)."""
    schedules = cls.SCHEDULES
    hit = _checked_cache.get(cls)
    if hit is None or hit[0] is not schedules:
        hit = _checked_cache[cls] = (schedules, check_schedules(cls))
    return hit[1]


def entries(app: App, conn=None) -> list[Entry]:
    """Every entry: the code's, then the stored ones of registered tasks (one statement;
    a stored entry with a code entry's name is left out: code wins).

    Args:
        conn: a connection to read with (None: one of the app's engine).
    """
    code = code_entries(app)
    if conn is None:
        with app.engine.connect() as c:
            rows = store.schedules.list_schedules(c)
    else:
        rows = store.schedules.list_schedules(conn)
    taken = {e.entry_task for e in code}
    known = app.handlers.tasks()
    stored = [Entry(r["task"], r["name"], r["cron"], r["timezone"], _payload(r["payload"]),
                    "database", r["created_by"]) for r in rows
              if r["task"] in known and entry_task(r["task"], r["name"]) not in taken]
    return code + stored


def schedule_tasks(app: App, found: list[Entry] | None = None) -> dict[str, str]:
    """Every schedulable task mapped to the type it starts: the handlers' tasks and their
    entries' (`<task>:<name>`), sorted by name.

    Args:
        found: the entries already read (`entries(app)`); None reads them.
    """
    known = app.handlers.tasks()
    tasks = dict(known)
    for e in entries(app) if found is None else found:
        tasks[e.entry_task] = known[e.task]
    return dict(sorted(tasks.items()))


def find(app: App, spec: str) -> Entry:
    """The entry named `spec` (`TASK:NAME`).

    Raises:
        InvalidJob: `spec` is not `TASK:NAME`. HandlerNotFound: no such entry.
    """
    task, name = split_task(spec)
    for e in entries(app):
        if e.task == task and e.name == name:
            return e
    raise HandlerNotFound(f"no schedule {spec!r}; `cronjobs schedules list` lists them")


def add(app: App, task: str, name: str, cron: str, *, timezone: str | None = None,
        payload: dict | None = None, by: str | None = None) -> Entry:
    """Store a new entry `task`:`name` (its slots start with the next tick).

    Args:
        task: a registered handler's task; name: `[a-z0-9_-]{1,64}`; cron: what
            `FREQUENCY` accepts; timezone: an IANA zone or None; payload: a JSON object
            or None; by: who (`user@host`, the dashboard's operator; cut to 64).

    Returns:
        The stored `Entry`.

    Raises:
        HandlerNotFound: no registered task `task`.
        InvalidJob: a bad field (one line naming it and its value), or a code entry or
            a stored one already has that name. Nothing is written then.
    """
    payload = _check(app, task, name, cron, timezone, payload)
    if any(e.task == task and e.name == name for e in code_entries(app)):
        raise ScheduleExists(f"schedule {entry_task(task, name)!r} is an entry of the handler's "
                         f"SCHEDULES (code); pick another name")
    text = payload_text(payload)
    by = by[:64] if by else None
    made = run_in_transaction(app.engine, lambda c: store.schedules.add_schedule(
        c, task=task, name=name, cron=cron, timezone=timezone, payload=text, created_by=by,
        now=app.clock.now()))
    if not made:
        raise ScheduleExists(f"schedule {entry_task(task, name)!r} exists already; "
                         f"remove it first or edit it")
    return Entry(task, name, cron, timezone, payload, "database", by)


def update(app: App, spec: str, cron: str, *, timezone: str | None = None,
           payload: dict | None = None) -> Entry:
    """Change a stored entry's cron line, zone and payload (`spec`: `TASK:NAME`).

    Raises:
        InvalidJob: a bad field, or `spec` is a code entry (its class says what it is).
        HandlerNotFound: no such entry.
    """
    entry = _stored(app, spec, "edited")
    payload = _check(app, entry.task, entry.name, cron, timezone, payload)
    text = payload_text(payload)
    run_in_transaction(app.engine, lambda c: store.schedules.update_schedule(
        c, entry.task, entry.name, cron=cron, timezone=timezone, payload=text,
        now=app.clock.now()))
    return Entry(entry.task, entry.name, cron, timezone, payload, "database", entry.created_by)


def remove(app: App, spec: str) -> Entry:
    """Delete a stored entry (`TASK:NAME`): its future slots stop; its runs and runtime
    row (history) stay. Returns the entry removed.

    Raises:
        InvalidJob: `spec` is a code entry ("cannot be removed"), or not `TASK:NAME`.
        HandlerNotFound: no such entry.
    """
    entry = _stored(app, spec, "removed")
    run_in_transaction(app.engine, lambda c: store.schedules.delete_schedule(
        c, entry.task, entry.name))
    return entry


def pause(app: App, spec: str, *, by: str, reason: str | None = None) -> Entry:
    """Pause entry `spec` (`TASK:NAME`): the flow pause of its task (its slots are skipped,
    recorded as `paused`), until resumed.

    Raises:
        InvalidJob, HandlerNotFound: as `find`.
    """
    entry = find(app, spec)
    run_in_transaction(app.engine, lambda c: store.pause(
        c, "task", entry.entry_task, now=store.flow.flow_now(c, app.clock), reason=reason,
        by=by[:64]))
    return entry


def resume(app: App, spec: str) -> bool:
    """Lift the pause of entry `spec` (`TASK:NAME`). Returns False when it was not paused.

    Raises:
        InvalidJob, HandlerNotFound: as `find`.
    """
    entry = find(app, spec)
    return bool(run_in_transaction(app.engine, lambda c: store.resume(
        c, "task", entry.entry_task)))


def paused_tasks(app: App) -> set[str]:
    """The tasks with a live pause now (entries' among them)."""
    with app.engine.connect() as conn:
        now = store.flow.flow_now(conn, app.clock)
        return {p["name"] for p in store.list_pauses(conn, now) if p["scope"] == "task"}


def zone_of(app: App, entry: Entry) -> str:
    """The zone entry `entry`'s cron line is read in: its own, else its handler's
    `TIMEZONE`, else the settings' `timezone`."""
    cls = app.handlers.resolve_handler(app.handlers.tasks()[entry.task])
    return entry.timezone or getattr(cls, "TIMEZONE", None) or app.settings.timezone


def listing(app: App) -> list[dict]:
    """Every entry as `cronjobs schedules list`, the dashboard and `GET /api/schedules`
    show it: dicts with `task` (the entry's, `<task>:<name>`), `handler_task`, `name`,
    `cron`, `timezone` (the effective zone), `own_timezone` (the entry's, or None),
    `payload` (a dict), `source` (`code` or `database`), `created_by`, `paused` (bool),
    `next_run_at` (naive UTC: when its next slot begins; None while paused)."""
    found = entries(app)
    paused = paused_tasks(app)
    now = app.clock.now()
    out = []
    for e in found:
        zone = zone_of(app, e)
        stopped = e.entry_task in paused
        out.append({"task": e.entry_task, "handler_task": e.task, "name": e.name,
                    "cron": e.cron, "timezone": zone, "own_timezone": e.timezone,
                    "payload": e.payload, "source": e.source, "created_by": e.created_by,
                    "paused": stopped,
                    "next_run_at": None if stopped else current_slot(e.cron, now, zone).next_at})
    return out


def _stored(app: App, spec: str, verb: str) -> Entry:
    entry = find(app, spec)
    if entry.source == "code":
        raise InvalidJob(f"schedule {spec!r} is in the handler's SCHEDULES (code) and cannot "
                         f"be {verb} here; change the handler's code")
    return entry


def _check(app: App, task: str, name: str, cron: str, timezone: str | None,
           payload: object) -> dict:
    if task not in app.handlers.tasks():
        raise HandlerNotFound(f"unknown task {task!r}; `cronjobs tasks` lists them")
    if len(task) > 126:
        raise InvalidJob(f"task {task[:60]!r}... is too long for a schedule (126 characters)")
    return check_entry(name, cron, timezone, payload)


def _payload(text: str | None) -> dict:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
