"""Flow control as an operator sees it, for the dashboard, `health`, `cronjobs limits` and
`/metrics`: the limits of each job type (its handler's CONCURRENCY, RATE_LIMIT, LIMIT_KEY)
and of each queue (the settings' `[queues.<name>]`), the pauses that hold a task, the rows
held now (`store.held`: the claim's own conditions and budget, with the limits the claim
enforces: `executor.flow_control`) and what a pending row waits for. Every limit is read
from `flowrules` (`handler_limits`, `key_field`, `queue_limits`), as the claim reads it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from .. import store
from ..app import App
from ..handler import task_name
from ..job.executor import flow_control
from ..limits import WORKER_LIST_MAX_CHARS
from ..status import Status
from . import rules as flowrules
from .rules import Limits

# `cronjobs limits --json`'s "held" and health's flow data: this order, these names.
HELD_ORDER = ("rate_limited", "limited", "paused", "blocked")


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
    """The flow declarations of every registered type (`flowrules`), sorted by type."""
    out = []
    for job_type, cls in sorted(app.handlers.registered_handlers().items()):
        limits = flowrules.handler_limits(cls)
        out.append(TypeLimits(
            type=job_type, task=task_name(job_type), queue=cls.QUEUE or app.settings.default_queue,
            concurrency=limits.concurrency, rate_limit=limits.rate and str(limits.rate),
            limit_key=flowrules.key_field(cls)))
    return out


def queue_limits(app: App) -> dict[str, dict]:
    """The queue-level limits of the settings (`flowrules.queue_limits`): `{queue:
    {"concurrency": N or None, "rate_limit": text or None}}`, only queues with one."""
    return {name: {"concurrency": lm.concurrency, "rate_limit": lm.rate and str(lm.rate)}
            for name, lm in flowrules.queue_limits(app.settings.queues).items()}


def claim_limits(app: App) -> tuple[dict[str, Limits], dict[str, Limits]]:
    """The limits the claim enforces (`executor.flow_control`): `({job type: Limits},
    {queue: Limits})`, limited ones only."""
    flow = flow_control(app)
    return dict(flow.type_limits), dict(flow.queue_limits)


def limit_views(app: App) -> dict[str, dict]:
    """Every limit by the claim's name for it (`type:<type>`, `queue:<queue>`): `{"scope":
    "type" | "queue", "name", "concurrency" (N or None), "rate" ("5/s" or None), "per"
    (the limit key field, "limit_key()" or None)}`, as the pages and `limits` word it."""
    out = {f"type:{t.type}": {"scope": "type", "name": t.type, "concurrency": t.concurrency,
                              "rate": t.rate_limit, "per": t.limit_key}
           for t in type_limits(app) if t.limited}
    for name, lim in queue_limits(app).items():
        out[f"queue:{name}"] = {"scope": "queue", "name": name, "per": None,
                                "concurrency": lim["concurrency"], "rate": lim["rate_limit"]}
    return out


def held_now(app: App, conn: Connection, now: datetime, pauses: Iterable[Mapping],
             blocks: Iterable[Mapping]) -> list[dict]:
    """Due rows a claim would refuse now: held by `pauses`, `blocks` (as `store.flow` lists
    them) or the concurrency and rate limits of types and queues, at `now` (naive UTC):
    `store.held.held_rows` entries, each with `limits`: the `limit_views` of its
    `limiters`."""
    held = store.held.held_rows(conn, now, pauses=pauses, blocks=blocks,
                                flow=flow_control(app))
    views = limit_views(app)
    for entry in held:
        entry["limits"] = [views[n] for n in entry["limiters"] if n in views]
    return held


def held_totals(held: Iterable[Mapping]) -> dict[str, int]:
    """`{"rate_limited": n, "limited": n, "paused": n, "blocked": n}` of `held_now`
    entries (rows, capped counts as counted)."""
    held = list(held)
    return {reason: sum(h["rows"] for h in held if h["reason"] == reason)
            for reason in HELD_ORDER}


def held_by_queue(held: Iterable[Mapping]) -> dict[str, list[dict]]:
    """`held_now` entries summed per queue and reason: `{queue: [{"reason", "rows",
    "capped", "limits"}]}`, reasons in `HELD_ORDER`, each limit once."""
    out: dict[str, dict[str, dict]] = {}
    for h in held:
        entry = out.setdefault(h["queue"], {}).setdefault(
            h["reason"], {"reason": h["reason"], "rows": 0, "capped": False, "limits": []})
        entry["rows"] += h["rows"]
        entry["capped"] = entry["capped"] or h["capped"]
        entry["limits"] += [lm for lm in h.get("limits", ()) if lm not in entry["limits"]]
    return {queue: [reasons[r] for r in HELD_ORDER if r in reasons]
            for queue, reasons in sorted(out.items())}


def limit_text(limit: Mapping, reason: str) -> str:
    """A limit in words, for the CLI and health: `5/s on flow.chat`, `1/s per chat_id on
    tg.send`, `30/s on queue broadcast`; a concurrency limit (`reason` "limited"): `2 at
    once on ...`."""
    what = limit["rate"] if reason == "rate_limited" else f"{limit['concurrency']} at once"
    per = f" per {limit['per']}" if limit["per"] else ""
    where = f"queue {limit['name']}" if limit["scope"] == "queue" else limit["name"]
    return f"{what}{per} on {where}"


def held_text(held: Iterable[Mapping]) -> str:
    """The held rows in words, per reason: `8 rate-limited (5/s on flow.chat), 2
    limited (2 at once per chat on tg.send), 0 paused, 0 blocked`."""
    held = list(held)
    parts = []
    for reason in HELD_ORDER:
        rows = [h for h in held if h["reason"] == reason]
        texts = sorted({limit_text(lm, reason) for h in rows for lm in h.get("limits", ())})
        n = sum(h["rows"] for h in rows)
        parts.append(f"{n}{'+' if any(h['capped'] for h in rows) else ''} "
                     f"{reason.replace('_', '-')}" + (f" ({', '.join(texts)})" if texts else ""))
    return ", ".join(parts)


def waits_for(app: App, conn: Connection, row: Mapping, now: datetime) -> list[dict]:
    """What a due pending `row` (a dict of its columns) waits for at `now` (naive UTC),
    as the claim would find it: a full concurrency limit of its type's key or its queue
    (`{"kind": "concurrency", "limit": limit_views entry, "running": n}`); a rate limit
    that admits no start now, or fewer than the due rows ahead of it in its bucket
    (`{"kind": "rate", "limit": ..., "next_in": seconds until it admits a start (0: now),
    "ahead": (n, capped)}`); else a worker's free slot (`{"kind": "slot"}`). Empty for a
    row that is not pending or not due."""
    if row["status"] != Status.PENDING or (row["scheduled_at"] or now) > now:
        return []
    types, queues = claim_limits(app)
    views = limit_views(app)
    out = []
    for limiter, limits in ((f"type:{row['type']}", types.get(row["type"])),
                            (f"queue:{row['queue']}", queues.get(row["queue"]))):
        if limits is None or limiter not in views:
            continue
        bucket = "queue" if limiter.startswith("queue:") else "key" if limits.keyed else "type"
        if limits.concurrency:
            running = store.held.running_in(conn, row, bucket=bucket, cap=limits.concurrency)
            if running >= limits.concurrency:
                out.append({"kind": "concurrency", "limit": views[limiter], "running": running})
        if limits.rate:
            key = row["limit_key"] if bucket == "key" else None
            room = store.rates.rate_now(conn, limiter, limits.rate, now,
                                        db_clock=store.flow.uses_db_clock(app.clock))
            ahead = store.held.rows_ahead(conn, now, row, bucket=bucket)
            if ahead[0] >= room.admits(key):
                out.append({"kind": "rate", "limit": views[limiter],
                            "next_in": room.next_start_in(key), "ahead": ahead})
    return out or [{"kind": "slot"}]


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


def untaken(queue: str, live: Iterable[Mapping]) -> bool:
    """Whether no live worker takes `queue`: its due rows then wait for a worker, whatever
    else would hold them. `live`: the live workers' heartbeat rows (`store.list_workers`),
    whose `queues` is a comma-separated list; a list cut at `WORKER_LIST_MAX_CHARS` may
    name it, so it counts as taken."""
    for worker in live:
        names = worker.get("queues") or ""
        if len(names) >= WORKER_LIST_MAX_CHARS or queue in names.split(","):
            return False
    return True
