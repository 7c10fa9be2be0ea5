"""Rows held by flow control, for `/metrics`, `health`, `cronjobs limits` and the
dashboard: due `pending` rows that wait because a pause, a block, a full concurrency
limit or a rate limit holds them, per queue and type (never per limit key).

Bounded like the other gauges (`queues.py`): one statement per live pause, per blocked
type (its keys in chunks), per concurrency-limited type, per rate-limited type or queue,
each reading at most `cap` + 1 due rows through an index — `(queue, status, priority,
id)` for a queue, `(type, status, id)` for a type, `(status, type, limit_key)` for keys —
and grouping only those. A row held for two reasons counts once, under the first of
`paused`, `blocked`, `limited`, `rate_limited`.

A rate limit holds the due rows of a bucket (a type's key, a queue) beyond the starts it
admits now; what it admits is read from the claim's own start log through
`rates.rate_states` (`rate_now`), never counted a second way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import Connection, and_, func, not_, or_, select, true
from sqlalchemy.sql.elements import ColumnElement

from ..flowrules import Limits, Rate
from ..models import cronjob_queue as q
from ..status import Status
from .rates import rate_now
from .sql import due

HELD_CAP = 10_000
KEYS_PER_STATEMENT = 500
AHEAD_CAP = 1_000  # rows ahead of one row, on its Job page
REASONS = ("paused", "blocked", "limited", "rate_limited")


def held_rows(conn: Connection, now: datetime, *, pauses: Iterable[Mapping],
              blocks: Iterable[Mapping], concurrency: Mapping[str, int] | None = None,
              queue_concurrency: Mapping[str, int] | None = None,
              rates: Mapping[str, Limits] | None = None,
              queue_rates: Mapping[str, Rate] | None = None, cap: int = HELD_CAP
              ) -> list[dict]:
    """Due rows held by the live `pauses` and `blocks`, by full concurrency limits and by
    rate limits.

    Args:
        now: naive UTC; rows scheduled later are not due and not counted.
        pauses: live pauses (`flow.list_pauses`): dicts with `scope` and `name`; task
            pauses hold slots, not rows, and are ignored here.
        blocks: live blocks (`flow.list_blocks`): dicts with `type` and `limit_key`
            (None: the whole type).
        concurrency: `{job type: N}` of types with a CONCURRENCY (per limit key).
        queue_concurrency: `{queue: N}` of queues with a concurrency setting.
        rates: `{job type: Limits}` of types with a RATE_LIMIT (`keyed`: per limit key).
        queue_rates: `{queue: Rate}` of queues with a rate_limit setting.
        cap: rows read per statement at most (the count is then a lower bound).

    Returns:
        Dicts `{"queue", "type", "reason", "rows", "capped", "oldest_due_at",
        "limiters"}` (reason one of `REASONS`; `oldest_due_at` naive UTC; `limiters` the
        limits that hold them, as the claim names them: `type:<type>`, `queue:<queue>`;
        empty for a pause or block), sorted by queue, type, reason. A bucket's
        `rate_limited` rows are its due rows beyond the starts its rate admits now.
    """
    out: dict[tuple[str, str, str], dict] = {}
    free = _paused_and_blocked(conn, out, now, list(pauses), list(blocks), cap)
    _limited(conn, out, now, dict(concurrency or {}), free, cap)
    _queue_limited(conn, out, now, dict(queue_concurrency or {}), free, cap)
    _rate_limited(conn, out, now, dict(rates or {}), free, cap)
    _queue_rate_limited(conn, out, now, dict(queue_rates or {}), free, cap)
    return [dict(queue=k[0], type=k[1], reason=k[2], **{**v, "limiters": sorted(v["limiters"])})
            for k, v in sorted(out.items())]


def _paused_and_blocked(conn: Connection, out: dict, now: datetime, pauses: list[Mapping],
                        blocks: list[Mapping], cap: int) -> dict:
    """Count the rows paused, then those blocked; returns what the later reasons skip."""
    paused_queues = sorted({p["name"] for p in pauses if p["scope"] == "queue"})
    paused_types = sorted({p["name"] for p in pauses if p["scope"] == "type"})
    not_paused = _not_in(q.c.queue, paused_queues)
    for name in paused_queues:
        _add(conn, out, "paused", cap, q.c.queue == name, due(now))
    for name in paused_types:
        _add(conn, out, "paused", cap, q.c.type == name, due(now), not_paused)
    blocked_whole = sorted({b["type"] for b in blocks if b["limit_key"] is None}
                           - set(paused_types))
    for name in blocked_whole:
        _add(conn, out, "blocked", cap, q.c.type == name, due(now), not_paused)
    keys = _keys_by_type(b for b in blocks if b["limit_key"] is not None
                         and b["type"] not in paused_types and b["type"] not in blocked_whole)
    for name, chunk in _chunks(keys):
        _add(conn, out, "blocked", cap, q.c.status == Status.PENDING, q.c.type == name,
             q.c.limit_key.in_(chunk), due(now), not_paused)
    return {"paused_queues": paused_queues, "skip_types": set(paused_types) | set(blocked_whole),
            "blocked_keys": keys, "limited_keys": {}, "full_queues": set()}


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


def _limited(conn: Connection, out: dict, now: datetime, concurrency: dict[str, int],
             free: dict, cap: int) -> None:
    """Due rows of a (type, key) that has its CONCURRENCY running (a key of None: the
    type's rows without a key)."""
    types = sorted(t for t in concurrency if t not in free["skip_types"])
    if not types:
        return
    running = conn.execute(select(q.c.type, q.c.limit_key, func.count()).where(
        q.c.status == Status.RUNNING, q.c.type.in_(types)).group_by(q.c.type, q.c.limit_key))
    full: dict[str, list] = {}
    for job_type, key, n in running:
        if n >= concurrency[job_type] and key not in free["blocked_keys"].get(job_type, ()):
            full.setdefault(job_type, []).append(key)
            free["limited_keys"].setdefault(job_type, set()).add(key)
    for name, chunk in _chunks({t: sorted(k for k in v if k is not None) for t, v in full.items()}):
        _add(conn, out, "limited", cap, q.c.status == Status.PENDING, q.c.type == name,
             q.c.limit_key.in_(chunk), due(now), _not_in(q.c.queue, free["paused_queues"]),
             limiter=f"type:{name}")
    for name in sorted(t for t, v in full.items() if None in v):
        _add(conn, out, "limited", cap, q.c.status == Status.PENDING, q.c.type == name,
             q.c.limit_key.is_(None), due(now), _not_in(q.c.queue, free["paused_queues"]),
             limiter=f"type:{name}")


def _queue_limited(conn: Connection, out: dict, now: datetime, limits: dict[str, int],
                   free: dict, cap: int) -> None:
    """Due rows of a queue that has its concurrency setting's rows running."""
    for name, n in sorted(limits.items()):
        if name in free["paused_queues"] or not n:
            continue
        running = conn.execute(select(func.count()).select_from(
            select(q.c.id).where(q.c.queue == name, q.c.status == Status.RUNNING)
            .limit(n).subquery())).scalar_one()
        if running >= n:
            free["full_queues"].add(name)
            _add(conn, out, "limited", cap, q.c.queue == name, due(now),
                 _not_in(q.c.type, sorted(free["skip_types"])), limiter=f"queue:{name}")


def _rate_limited(conn: Connection, out: dict, now: datetime, rates: dict[str, Limits],
                  free: dict, cap: int) -> None:
    """Due rows of a type's bucket (its key, for a keyed type) beyond the starts its
    RATE_LIMIT admits now; rows of a blocked or concurrency-full key, of a paused queue or
    a concurrency-full queue are counted under those reasons already."""
    skip_queues = free["paused_queues"] + sorted(free["full_queues"])
    for name, limits in sorted(rates.items()):
        if name in free["skip_types"] or limits.rate is None:
            continue
        room = rate_now(conn, f"type:{name}", limits.rate, now)
        skip = set(free["blocked_keys"].get(name, ())) | free["limited_keys"].get(name, set())
        groups, capped = _due_groups(conn, cap, q.c.limit_key, q.c.type == name, due(now),
                                     _not_in(q.c.queue, skip_queues))
        buckets: dict[str | None, list] = {}
        for queue, key, n, oldest in groups:
            if key not in skip:
                buckets.setdefault(key if limits.keyed else None, []).append((queue, n, oldest))
        for bucket, parts in buckets.items():
            _beyond(out, room.admits(bucket), parts, name, capped, f"type:{name}")


def _queue_rate_limited(conn: Connection, out: dict, now: datetime, rates: dict[str, Rate],
                        free: dict, cap: int) -> None:
    """Due rows of a queue beyond the starts its rate_limit setting admits now, among
    those no earlier reason counts."""
    for name, rate in sorted(rates.items()):
        if name in free["paused_queues"] or name in free["full_queues"]:
            continue
        room = rate_now(conn, f"queue:{name}", rate, now)
        groups, capped = _due_groups(conn, cap, q.c.type, q.c.queue == name, due(now),
                                     _not_in(q.c.type, sorted(free["skip_types"])))
        left = room.admits(None)
        for _, job_type, n, oldest in sorted(groups, key=lambda g: g[3]):
            counted = sum(out[(name, job_type, r)]["rows"] for r in REASONS
                          if (name, job_type, r) in out)
            waiting = max(0, n - counted)
            _beyond(out, left, [(name, waiting, oldest)], job_type, capped, f"queue:{name}")
            left = max(0, left - waiting)


def _beyond(out: dict, admitted: int, parts: list[tuple], job_type: str, capped: bool,
            limiter: str) -> None:
    """Count as `rate_limited` the rows of one bucket (`parts`: `(queue, rows,
    oldest_due_at)`) beyond the `admitted` starts, which go to its oldest rows first."""
    for queue, n, oldest in sorted(parts, key=lambda p: p[2]):
        held = max(0, n - admitted)
        admitted = max(0, admitted - n)
        if held:
            _put(out, (queue, job_type, "rate_limited"), held, capped, oldest, limiter)


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
