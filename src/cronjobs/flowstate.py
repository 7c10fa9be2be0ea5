"""Flow control as an operator sees it, for the dashboard, `health` and `/metrics`: the
limits of each job type (its handler's CONCURRENCY, RATE_LIMIT, LIMIT_KEY) and of
each queue (the settings' `[queues.<name>]`), the pauses that hold a task, and the rows
held now (`store.held`, with the concurrency limits filled in from the handlers and the
settings)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from . import store
from .app import App
from .handler import task_name


@dataclass(frozen=True)
class TypeLimits:
    """The flow declarations of one job type's handler.

    Attributes:
        type, task, queue: the job type, its task and its broker queue.
        concurrency: CONCURRENCY (rows running at once, per key when keyed) or None.
        rate_limit: RATE_LIMIT text (`"30/s"`, `/m`, `/h`) or None.
        limit_key: LIMIT_KEY (a payload field), `limit_key()` when the handler computes
            it, or None.
    """

    type: str
    task: str
    queue: str
    concurrency: int | None
    rate_limit: str | None
    limit_key: str | None

    @property
    def limited(self) -> bool:
        """True when the type has a concurrency or a rate limit."""
        return bool(self.concurrency or self.rate_limit)


def type_limits(app: App) -> list[TypeLimits]:
    """The flow declarations of every registered type, sorted by type."""
    registry = app.handlers
    out = []
    for job_type, cls in sorted(registry.registered_handlers().items()):
        key = getattr(cls, "LIMIT_KEY", None)
        if key is None and callable(getattr(cls, "limit_key", None)):
            key = "limit_key()"
        out.append(TypeLimits(
            type=job_type, task=task_name(job_type), queue=cls.QUEUE or app.settings.default_queue,
            concurrency=getattr(cls, "CONCURRENCY", None) or None,
            rate_limit=getattr(cls, "RATE_LIMIT", None) or None, limit_key=key))
    return out


def queue_limits(app: App) -> dict[str, dict]:
    """The queue-level limits of the settings: `{queue: {"concurrency": N or None,
    "rate_limit": text or None}}`, only queues with one."""
    out = {}
    for name, value in sorted((getattr(app.settings, "queues", None) or {}).items()):
        get = value.get if isinstance(value, Mapping) else lambda k, v=value: getattr(v, k, None)
        limits = {"concurrency": get("concurrency"), "rate_limit": get("rate_limit")}
        if any(limits.values()):
            out[name] = limits
    return out


def held_now(app: App, conn: Connection, now: datetime, pauses: Iterable[Mapping],
             blocks: Iterable[Mapping]) -> list[dict]:
    """Due rows held now by `pauses`, `blocks` (as `store.flow` lists them) and full
    concurrency limits of types and queues: `store.held.held_rows` entries."""
    return store.held.held_rows(
        conn, now, pauses=pauses, blocks=blocks,
        concurrency={t.type: t.concurrency for t in type_limits(app) if t.concurrency},
        queue_concurrency={q: lim["concurrency"] for q, lim in queue_limits(app).items()
                           if lim["concurrency"]})


def pauses_holding(pauses: Iterable[Mapping], task: str | None, types: Iterable[str],
                   queues: Iterable[str]) -> list[dict]:
    """The pauses among `pauses` that hold task `task`: its own, one of its `types`', or
    one of its `queues`'. `task` None: those that hold a row of `types` in `queues` (a
    task's pause skips its slots, it holds no row)."""
    targets = {("type", t) for t in types} | {("queue", q) for q in queues}
    if task is not None:
        targets.add(("task", task))
    return [dict(p) for p in pauses if (p["scope"], p["name"]) in targets]


@dataclass(frozen=True)
class TaskFlow:
    """Flow control of one task, for the Tasks pages.

    Attributes:
        limits: the `TypeLimits` of the task's types (all of them, limited or not).
        pauses: the live pauses that hold the task (its own, a type's, a queue's), as
            `store.flow.list_pauses` gives them.
    """

    limits: tuple[TypeLimits, ...]
    pauses: tuple[dict, ...]

    @property
    def limited(self) -> tuple[TypeLimits, ...]:
        """The task's types that have a concurrency or rate limit."""
        return tuple(t for t in self.limits if t.limited)


def task_flows(app: App, tasks: Mapping[str, tuple[str, ...]], pauses: Iterable[Mapping]
               ) -> dict[str, TaskFlow]:
    """Flow control of `tasks` (`{task: its types}`) under the live `pauses` (as
    `store.flow.list_pauses` gives them)."""
    by_type = {t.type: t for t in type_limits(app)}
    pauses = list(pauses)
    out = {}
    for task, types in tasks.items():
        mine = tuple(by_type[t] for t in types if t in by_type)
        out[task] = TaskFlow(limits=mine, pauses=tuple(pauses_holding(
            pauses, task, types, {t.queue for t in mine})))
    return out
