"""One row builder for the task list: `cronjobs tasks` and the dashboard's Tasks page both
use it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from .. import store
from ..app import App
from ..errors import ConfigError
from ..family.view import family_line, read_families
from ..flow.state import TaskFlow, TypeLimits, task_flows
from ..status import Status
from .overlap import policy_of
from .slots import current_slot, describe, is_cron
from .tasks import TaskInfo, after_of, slot_run_at, task_infos

NOT_INSTALLED = "module not installed"  # what a task whose handler is not available() shows


@dataclass(frozen=True)
class TaskRow:
    """A task as an operator sees it. Times are naive UTC.

    Attributes:
        task: the task name.
        type: the type the scheduler (and Run now) starts; `types`: all its types.
        frequency: the effective frequency (None: started by hand or by code only).
        frequency_from: `handler`, `settings` (`[tasks.x]`) or `database` (an override in
            `cronjob_runtime.frequency`); `handler_frequency` is the class's FREQUENCY.
        source: `built-in`, `plugin` or `folder` (where the handler class came from);
            `external` for a task that runs elsewhere (`schedule.pingin`).
        enabled / available / destructive: kill switch, `available()`, DESTRUCTIVE.
        last_run_at, last_job_id, last_status: the last *scheduled* run.
        next_run_at: when the next run starts: the next slot's start plus the task's
            SPREAD/JITTER offset, never in the past (None: disabled, not available or
            no frequency).
        last_manual_at, last_manual_job_id, last_manual_status: the last manual run.
        overlap: the handler's OVERLAP (`skip`, `buffer_one`, `allow`).
        skipped_count: slots that started nothing (overlap, pause), all time.
        last_skipped_slot, last_skipped_at, last_skip_reason: the last of them, when it
            was skipped and why (`running`, `buffered`, `paused`, `error`).
        buffered_slot: the slot a `buffer_one` task keeps waiting behind its running run.
        limits: its types' CONCURRENCY / RATE_LIMIT / LIMIT_KEY in words ("at most 2
            running per chat_id; 30/s"), "" when none is limited.
        paused_by: the live pauses holding it ("task x", "queue default", "type t"),
            "" when none does.
        after: the task whose run of the same slot this one's waits for (`AFTER`), "".
        waiting: "waiting for acme-sync" while the last scheduled run waits for it, "".
        last_family: the last scheduled run's family in one line ("200 children: 176
            ok, 24 failed (13 timeouts) — 9.2 s — callback completed"), "" when that run
            has no row under it (nor a callback) or is gone.
        timezone: the zone the task's times are shown in (its own `TIMEZONE`, else the
            settings' for a cron line, else UTC).
        next_run_local: `next_run_at` as wall time in `timezone`, the zone named
            (`2027-03-28 03:30 CEST (Europe/Berlin)`), "" without one.
        last_slot_skipped: why the task's latest slot started nothing (`running`,
            `paused`, ...), "" when its latest slot ran.
        jitter, spread: the task's JITTER (seconds) and SPREAD.
        idle: the handler's `idle(app)` note while the task has nothing to do (its slots
            are not started; `next_run_at` is None), "" when it has work.
    """

    task: str
    type: str
    types: tuple[str, ...]
    frequency: str | None
    frequency_from: str | None
    handler_frequency: str | None
    source: str
    enabled: bool
    available: bool
    destructive: bool
    last_run_at: datetime | None
    last_job_id: int | None
    last_status: str | None
    next_run_at: datetime | None
    last_manual_at: datetime | None
    last_manual_job_id: int | None
    last_manual_status: str | None
    overlap: str = "skip"
    skipped_count: int = 0
    last_skipped_slot: str | None = None
    last_skipped_at: datetime | None = None
    last_skip_reason: str | None = None
    buffered_slot: str | None = None
    limits: str = ""
    paused_by: str = ""
    after: str = ""
    waiting: str = ""
    last_family: str = ""
    timezone: str = "UTC"
    next_run_local: str = ""
    last_slot_skipped: str = ""
    jitter: float = 0.0
    spread: bool = False
    idle: str = ""

    def as_dict(self) -> dict:
        """The row as a dict (JSON-friendly apart from datetimes)."""
        return asdict(self)


def source_kind(source: str | None) -> str:
    """`built-in`, `plugin` or `folder` from the registry's source text of a handler."""
    if not source:
        return "plugin"
    if source.startswith("builtin"):
        return "built-in"
    if source.startswith(("entry point", "register()")):
        return "plugin"
    return "folder"


def task_rows(app: App) -> list[TaskRow]:
    """Every registered task, sorted by name (creates missing runtime rows, like the scheduler)."""
    registry = app.handlers
    now = app.clock.now()
    infos = task_infos(app)
    with app.engine.connect() as conn:
        manual = store.views.job_statuses(
            conn, [i.runtime.get("last_manual_job_id") for i in infos])
        pauses = store.list_pauses(conn, store.flow.flow_now(conn, app.clock))
        families = read_families(conn, [i.runtime["last_job_id"] for i in infos
                                        if i.runtime.get("last_job_id")])
    flows = task_flows(app, {i.task: tuple(registry.task_types(i.task)) for i in infos}, pauses)
    try:
        after = after_of(app)
    except ConfigError:  # the scheduler refuses to start and says why; the list still shows
        after = {}
    rows = []
    for info in infos:
        rt = info.runtime
        handler_frequency = info.handler.FREQUENCY
        origin = _frequency_from(app, info)
        next_run = next_run_at(info, now) if info.enabled and info.available \
            and not info.idle else None
        zone = shown_zone(app, info)
        rows.append(TaskRow(
            task=info.task, type=info.type, types=tuple(registry.task_types(info.task)),
            frequency=info.frequency, frequency_from=origin, handler_frequency=handler_frequency,
            source=_source(registry, info), enabled=info.enabled,
            available=info.available, destructive=bool(getattr(info.handler, "DESTRUCTIVE", False)),
            last_run_at=rt.get("last_run_at"), last_job_id=rt.get("last_job_id"),
            last_status=rt.get("last_status"), next_run_at=next_run,
            last_manual_at=rt.get("last_manual_at"),
            last_manual_job_id=rt.get("last_manual_job_id"),
            last_manual_status=manual.get(rt.get("last_manual_job_id")),
            overlap=policy_of(info.handler), skipped_count=rt.get("skipped_count") or 0,
            last_skipped_slot=rt.get("last_skipped_slot"),
            last_skipped_at=rt.get("last_skipped_at"),
            last_skip_reason=rt.get("last_skip_reason"), buffered_slot=rt.get("buffered_slot"),
            limits=limits_text(flows[info.task]), paused_by=", ".join(
                f"{p['scope']} {p['name']}" for p in flows[info.task].pauses),
            after=after.get(info.task, ""),
            waiting=f"waiting for {after[info.task]}" if info.task in after
            and rt.get("last_status") == Status.WAITING else "",
            last_family=_line(families.get(rt.get("last_job_id"))),
            timezone=zone, next_run_local=local_text(next_run, zone),
            last_slot_skipped=_last_skip(info), jitter=info.jitter, spread=info.spread,
            idle=info.idle or ""))
    return rows


def _source(registry, info: TaskInfo) -> str:
    """`source_kind` of the task's handler; `external` for a task that runs elsewhere
    (`schedule.pingin`: its rows come from pings in)."""
    return "external" if info.external else source_kind(registry.handler_source(info.type))
def _frequency_from(app: App, info: TaskInfo) -> str | None:
    """Where the task's frequency comes from: `database`, `settings`, `handler` or None."""
    if info.runtime.get("frequency"):
        return "database"
    if app.settings.task(info.task).frequency:
        return "settings"
    return "handler" if info.handler.FREQUENCY else None


def next_run_at(info: TaskInfo, now: datetime) -> datetime | None:
    """When `info`'s next scheduled run starts, naive UTC, never before `now` (the first
    of `next_runs`). None without a frequency, or with one no slot fits (stored by hand:
    the scheduler reports that task's error; the list still shows). A task without an
    offset whose stored `next_run_at` (written with its last run) lies ahead is that time
    (no cron walk: the list of a thousand cron tasks stays fast)."""
    stored = info.runtime.get("next_run_at")
    if stored is not None and stored > now and not info.jitter and not info.spread \
            and info.runtime.get("frequency") is None:
        return stored
    try:
        runs = next_runs(info.task, info.frequency, now, info.timezone, jitter=info.jitter,
                         spread=info.spread, skipped=info.runtime.get("last_skipped_slot"), n=1)
    except Exception:  # e.g. a frequency stored by hand that no slot fits
        return None
    return runs[0] if runs else None


def next_runs(task: str, frequency: str | None, now: datetime, tz: str, *, jitter: float = 0,
              spread: bool = False, skipped: str | None = None, n: int = 5) -> list[datetime]:
    """The next `n` times the task's scheduled runs start after `now`, naive UTC: each
    slot's start plus its SPREAD/JITTER offset (`slot_run_at`), the current slot included
    while its run time lies ahead and it is not the slot `skipped`. Cron lines are read
    in `tz` (both passes of a repeated hour for a line that fires in both), named
    frequencies in UTC, as the scheduler does. `[]` without a frequency."""
    if not frequency:
        return []
    slot, runs = current_slot(frequency, now, tz), []
    while len(runs) < n:
        at = slot_run_at(task, slot, jitter=jitter, spread=spread)
        if at > now and slot.key != skipped:
            runs.append(at)
        slot = current_slot(frequency, slot.next_at, tz)
    return runs


def shown_zone(app: App, info: TaskInfo) -> str:
    """The zone a task's times are shown in: its own (`TIMEZONE`, `[tasks.x] timezone`, a
    schedule entry's),
    else the settings' for a cron line, else UTC (named frequencies are UTC periods)."""
    own = info.schedule is not None or app.settings.task(info.task).timezone \
        or getattr(info.handler, "TIMEZONE", None)
    if own or (info.frequency and is_cron(info.frequency)):
        return info.timezone
    return "UTC"


def local_text(at: datetime | None, zone: str) -> str:
    """`at` (naive UTC) as wall time in `zone` with the zone named:
    `2027-03-28 03:30 CEST (Europe/Berlin)`; "" for None."""
    if at is None:
        return ""
    local = at.replace(tzinfo=UTC).astimezone(ZoneInfo(zone))
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({zone})"


def _last_skip(info: TaskInfo) -> str:
    """The reason the task's latest slot was skipped, "" when its latest slot ran (keys of
    one frequency compared as the scheduler does)."""
    rt = info.runtime
    skipped, last = rt.get("last_skipped_slot"), rt.get("last_slot")
    if not skipped or not rt.get("last_skip_reason"):
        return ""
    if last is not None and (len(last) != len(skipped) or last >= skipped):
        return ""
    return rt["last_skip_reason"]


def _line(fam) -> str:
    """`family_line` of a run's family, "" without one or with nothing under its root."""
    return family_line(fam) if fam is not None and (fam.total or fam.callbacks) else ""


def limits_text(flow: TaskFlow) -> str:
    """A task's limits in words, one clause per limited type: "at most 2 running per
    chat_id, 30/s" ("" when no type of it is limited)."""
    parts = [type_limits_text(t) for t in flow.limited]
    if len(parts) > 1:
        parts = [f"{t.type}: {text}" for t, text in zip(flow.limited, parts, strict=True)]
    return "; ".join(parts)


def type_limits_text(t: TypeLimits) -> str:
    """One type's limits in words: "at most 2 running, 30/s per chat_id"; a LIMIT_KEY
    alone (it limits nothing, but a `RetryLater(block="key")` blocks per key): "key
    chat_id"; "" when it has none."""
    words = [f"at most {t.concurrency} running" if t.concurrency else "", t.rate_limit or ""]
    text = ", ".join(w for w in words if w)
    if t.limit_key:
        return f"{text} per {t.limit_key}" if text else f"key {t.limit_key}"
    return text


def cli_row(row: TaskRow) -> dict:
    """The columns of `cronjobs tasks` (empty string for None)."""
    def text(value) -> str:
        if value is None:
            return ""
        if isinstance(value, datetime):
            return value.strftime("%Y-%m-%d %H:%M:%S")
        return str(value)

    frequency = describe(row.frequency)
    if row.frequency_from in ("settings", "database"):
        frequency += "*"
    return {"task": row.task, "type": row.type, "frequency": frequency, "enabled": str(row.enabled),
            "available": f"idle: {row.idle}" if row.idle  # the why, where it may be long
            else "True" if row.available else NOT_INSTALLED, "source": row.source,
            "last_run_at": text(row.last_run_at), "last_job": text(row.last_job_id),
            "last_status": row.waiting or text(row.last_status), "family": row.last_family,
            "next_run_at": "idle" if row.idle else row.next_run_local.partition(" (")[0],
            "last_manual_at": text(row.last_manual_at),
            "manual_job": text(row.last_manual_job_id),
            "manual_status": text(row.last_manual_status), "after": row.after,
            "overlap": row.overlap,
            "skipped": str(row.skipped_count), "last_skipped": text(row.last_skipped_slot),
            "skip_reason": text(row.last_skip_reason), "buffered": text(row.buffered_slot),
            "limits": row.limits, "paused": row.paused_by, "zone": row.timezone}
