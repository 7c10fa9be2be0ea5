"""Rows held by flow control, for `/metrics`, `health`, `cronjobs limits` and the
dashboard: due `pending` rows that a claim would refuse now because a pause, a block, a
full concurrency limit or a rate limit holds them, per queue and type (never per limit
key).

Derived from the claim's own rules, never written a second way: a row is paused or
blocked by the conditions the claim's SELECT carries (`flow.paused`, `flow.blocked`: the
same SQL text), and held by a limit when the claim's `limiter.Budget`, counted as a claim
counts it (without locking or pruning), refuses it walking the due rows in claim order
(`priority`, `id`). Pauses and blocks are read one statement per live pause and per
blocked type (its keys in chunks), each reading at most `cap` + 1 due rows through an
index — `(queue, status, priority, id)` for a queue, `(type, status, id)` for a type,
`(status, type, limit_key)` for keys — and grouping only those; limits one statement per
queue that has a limit or due rows of a limited type, reading at most `cap` + 1 rows in
claim order. A row held for two reasons counts once, under the first of `paused`,
`blocked`, then the limit that refuses it (a type's bucket before its queue; `limited`
before `rate_limited`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import Connection, and_, func, not_, or_, select, true
from sqlalchemy.sql.elements import ColumnElement

from ..status import Status
from .flow import blocked, paused
from .limiter import FlowControl, count_budget, queue_room
from .models import cronjob_queue as q
from .sql import due
from .sql import name as dialect_of

HELD_CAP = 10_000
KEYS_PER_STATEMENT = 500
AHEAD_CAP = 1_000  # rows ahead of one row, on its Job page
REASONS = ("paused", "blocked", "limited", "rate_limited")


def held_rows(conn: Connection, now: datetime, *, pauses: Iterable[Mapping],
              blocks: Iterable[Mapping], flow: FlowControl | None = None,
              cap: int = HELD_CAP) -> list[dict]:
    """Due rows a claim would refuse now: held by the live `pauses` and `blocks`, or by
    the limits of `flow`.

    Args:
        now: naive UTC, the instant the pauses and blocks are judged at; rows scheduled
            later are not due and not counted.
        pauses: live pauses (`flow.list_pauses`): dicts with `scope` and `name`; task
            pauses hold slots, not rows, and are ignored here.
        blocks: live blocks (`flow.list_blocks`): dicts with `type` and `limit_key`
            (None: the whole type).
        flow: the limits the claims enforce (`limiter.FlowControl`, as the workers build
            it from `flowrules`); None: no limit.
        cap: rows read per statement at most (the count is then a lower bound).

    Returns:
        Dicts `{"queue", "type", "reason", "rows", "capped", "oldest_due_at",
        "limiters"}` (reason one of `REASONS`; `oldest_due_at` naive UTC; `limiters` the
        limits that hold them, as the claim names them: `type:<type>`, `queue:<queue>`;
        empty for a pause or block), sorted by queue, type, reason.
    """
    out: dict[tuple[str, str, str], dict] = {}
    _paused_and_blocked(conn, out, now, list(pauses), list(blocks), cap)
    if flow is not None and (flow.type_limits or flow.queue_limits):
        _limited(conn, out, now, flow, cap)
    return [dict(queue=k[0], type=k[1], reason=k[2], **{**v, "limiters": sorted(v["limiters"])})
            for k, v in sorted(out.items())]


def _paused_and_blocked(conn: Connection, out: dict, now: datetime, pauses: list[Mapping],
                        blocks: list[Mapping], cap: int) -> None:
    """Count the rows paused, then those blocked, each statement narrowed to one pause's
    or block's rows (an index) and decided by the claim's condition."""
    paused_queues = sorted({p["name"] for p in pauses if p["scope"] == "queue"})
    paused_types = sorted({p["name"] for p in pauses if p["scope"] == "type"})
    is_paused, is_blocked = paused(now), blocked(now)
    for name in paused_queues:
        _add(conn, out, "paused", cap, q.c.queue == name, due(now), is_paused)
    for name in paused_types:
        _add(conn, out, "paused", cap, q.c.type == name, due(now), is_paused,
             _not_in(q.c.queue, paused_queues))
    blocked_whole = sorted({b["type"] for b in blocks if b["limit_key"] is None})
    for name in blocked_whole:
        _add(conn, out, "blocked", cap, q.c.type == name, due(now), not_(is_paused), is_blocked)
    keys = _keys_by_type(b for b in blocks if b["limit_key"] is not None
                         and b["type"] not in blocked_whole)
    for name, chunk in _chunks(keys):
        _add(conn, out, "blocked", cap, q.c.status == Status.PENDING, q.c.type == name,
             q.c.limit_key.in_(chunk), due(now), not_(is_paused), is_blocked)


def _limited(conn: Connection, out: dict, now: datetime, flow: FlowControl, cap: int) -> None:
    """Count the due rows neither paused nor blocked that the claim's `Budget` refuses,
    walking each queue's in claim order (a type's bucket is shared by its queues, walked
    in name order)."""
    dialect = dialect_of(conn)
    types = sorted(flow.type_limits)
    queues = set(flow.queue_limits)
    if types:
        queues |= {r[0] for r in conn.execute(
            select(q.c.queue).where(due(now), q.c.type.in_(types)).group_by(q.c.queue))}
    budget = count_budget(conn, dialect, flow, now, claiming=False)
    free = (due(now), not_(paused(now)), not_(blocked(now)))
    due_at = func.coalesce(q.c.scheduled_at, q.c.created_at)
    for queue in sorted(queues):
        budget.queue_name = queue
        budget.queue = queue_room(conn, dialect, flow, queue, now, claiming=False)
        only = () if budget.queue is not None else (q.c.type.in_(types),)
        rows = conn.execute(select(q.c.type, q.c.limit_key, due_at).where(
            q.c.queue == queue, *free, *only).order_by(q.c.priority, q.c.id).limit(cap + 1)
        ).all()
        capped = len(rows) > cap
        for job_type, key, at in rows[:cap]:
            refused = budget.admit({"type": job_type, "limit_key": key})
            if refused is not None:
                _put(out, (queue, job_type, refused[0]), 1, capped, at, refused[1])


def rows_ahead(conn: Connection, now: datetime, row: Mapping, *, bucket: str,
               cap: int = AHEAD_CAP) -> tuple[int, bool]:
    """The due rows of pending `row`'s queue that a claim takes before it (`priority`,
    then `id`), in its rate bucket: `bucket` "queue" (the whole queue), "type" (its
    type), "key" (its type and limit key). Reads at most `cap` + 1 through the claim's
    index.

    Returns:
        `(n, capped)`, `capped` True when more than `cap` (n is then `cap`).
    """
    conds = [q.c.queue == row["queue"], due(now), or_(
        q.c.priority < row["priority"], and_(q.c.priority == row["priority"], q.c.id < row["id"]))]
    if bucket in ("type", "key"):
        conds.append(q.c.type == row["type"])
    if bucket == "key":
        key = row["limit_key"]
        conds.append(q.c.limit_key.is_(None) if key is None else q.c.limit_key == key)
    inner = select(q.c.id).where(*conds).limit(cap + 1).subquery()
    n = conn.execute(select(func.count()).select_from(inner)).scalar_one()
    return min(n, cap), n > cap


def running_in(conn: Connection, row: Mapping, *, bucket: str, cap: int) -> int:
    """The rows running in `row`'s concurrency bucket (`bucket` as in `rows_ahead`), at
    most `cap` counted (its limit: the index range read stops there)."""
    conds = [q.c.status == Status.RUNNING]
    if bucket == "queue":
        conds.append(q.c.queue == row["queue"])
    else:
        conds.append(q.c.type == row["type"])
    if bucket == "key":
        key = row["limit_key"]
        conds.append(q.c.limit_key.is_(None) if key is None else q.c.limit_key == key)
    inner = select(q.c.id).where(*conds).limit(cap).subquery()
    return conn.execute(select(func.count()).select_from(inner)).scalar_one()


def oldest_held(rows: Iterable[Mapping], reasons: Iterable[str]) -> datetime | None:
    """The oldest `oldest_due_at` (naive UTC) of `held_rows` entries of `reasons`, or None."""
    wanted = set(reasons)
    times = [r["oldest_due_at"] for r in rows if r["reason"] in wanted and r["oldest_due_at"]]
    return min(times) if times else None


def _due_groups(conn: Connection, cap: int, column, *conds: ColumnElement
                ) -> tuple[list[tuple], bool]:
    """The first `cap` + 1 rows matching `conds`, grouped by queue and `column`:
    `([(queue, value, rows, oldest_due_at)], capped)`."""
    due_at = func.coalesce(q.c.scheduled_at, q.c.created_at)
    inner = select(q.c.queue, column.label("value"), due_at.label("due_at")).where(
        *conds).limit(cap + 1).subquery()
    rows = conn.execute(select(inner.c.queue, inner.c.value, func.count(),
                               func.min(inner.c.due_at)).group_by(inner.c.queue, inner.c.value)
                        ).all()
    return [tuple(r) for r in rows], sum(r[2] for r in rows) > cap


def _add(conn: Connection, out: dict, reason: str, cap: int, *conds: ColumnElement,
         limiter: str | None = None) -> None:
    """Count (per queue and type) the first `cap` + 1 due rows matching `conds`; rows
    already counted under an earlier reason are excluded by the caller's conditions."""
    rows, capped = _due_groups(conn, cap, q.c.type, *conds)
    for queue, job_type, n, oldest in rows:
        _put(out, (queue, job_type, reason), n, capped, oldest, limiter)


def _put(out: dict, key: tuple[str, str, str], rows: int, capped: bool,
         oldest: datetime | None, limiter: str | None) -> None:
    entry = out.setdefault(key, {"rows": 0, "capped": False, "oldest_due_at": None,
                                 "limiters": set()})
    entry["rows"] += rows
    entry["capped"] = entry["capped"] or capped
    if oldest is not None:
        entry["oldest_due_at"] = min(oldest, entry["oldest_due_at"] or oldest)
    if limiter:
        entry["limiters"].add(limiter)


def _keys_by_type(blocks: Iterable[Mapping]) -> dict[str, list[str]]:
    keys: dict[str, set[str]] = {}
    for b in blocks:
        keys.setdefault(b["type"], set()).add(b["limit_key"])
    return {t: sorted(k) for t, k in keys.items()}


def _chunks(keys: Mapping[str, list]) -> list[tuple[str, list]]:
    return [(t, v[i:i + KEYS_PER_STATEMENT]) for t, v in sorted(keys.items())
            for i in range(0, len(v), KEYS_PER_STATEMENT)]


def _not_in(column, values: list[str]) -> ColumnElement:
    return not_(column.in_(values)) if values else true()
