"""Rows held by flow control, for `/metrics`, `health` and the dashboard: due `pending`
rows that wait because a pause, a block or a concurrency limit holds them, per queue and
type (never per limit key).

Bounded like the other gauges (`queues.py`): one statement per live pause, per blocked
type (its keys in chunks), per concurrency-limited type, each reading at most `cap` + 1
due rows through an index — `(queue, status, priority, id)` for a paused queue,
`(type, status, id)` for a paused or blocked type, `(status, type, limit_key)` for keys —
and grouping only those. A row held for two reasons counts once, under the first of
`paused`, `blocked`, `limited`. Rows waiting for a rate limit's window are not counted
here: a rate limit starts them within its window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import Connection, func, not_, select, true
from sqlalchemy.sql.elements import ColumnElement

from ..models import cronjob_queue as q
from ..status import Status
from .sql import due

HELD_CAP = 10_000
KEYS_PER_STATEMENT = 500
REASONS = ("paused", "blocked", "limited")


def held_rows(conn: Connection, now: datetime, *, pauses: Iterable[Mapping],
              blocks: Iterable[Mapping], concurrency: Mapping[str, int] | None = None,
              queue_concurrency: Mapping[str, int] | None = None, cap: int = HELD_CAP
              ) -> list[dict]:
    """Due rows held by the live `pauses` and `blocks` and by full concurrency limits.

    Args:
        now: naive UTC; rows scheduled later are not due and not counted.
        pauses: live pauses (`flow.list_pauses`): dicts with `scope` and `name`; task
            pauses hold slots, not rows, and are ignored here.
        blocks: live blocks (`flow.list_blocks`): dicts with `type` and `limit_key`
            (None: the whole type).
        concurrency: `{job type: N}` of types with a CONCURRENCY (per limit key).
        queue_concurrency: `{queue: N}` of queues with a concurrency setting.
        cap: rows read per statement at most (the count is then a lower bound).

    Returns:
        Dicts `{"queue", "type", "reason", "rows", "capped", "oldest_due_at"}` (reason one
        of `REASONS`; `oldest_due_at` naive UTC), sorted by queue, type, reason.
    """
    pauses, blocks = list(pauses), list(blocks)
    paused_queues = sorted({p["name"] for p in pauses if p["scope"] == "queue"})
    paused_types = sorted({p["name"] for p in pauses if p["scope"] == "type"})
    out: dict[tuple[str, str, str], dict] = {}
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
    free = {"paused_queues": paused_queues, "skip_types": set(paused_types) | set(blocked_whole),
            "blocked_keys": keys}
    _limited(conn, out, now, dict(concurrency or {}), free, cap)
    _queue_limited(conn, out, now, dict(queue_concurrency or {}), free, cap)
    return [dict(queue=k[0], type=k[1], reason=k[2], **v) for k, v in sorted(out.items())]


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
    for name, chunk in _chunks({t: sorted(k for k in v if k is not None) for t, v in full.items()}):
        _add(conn, out, "limited", cap, q.c.status == Status.PENDING, q.c.type == name,
             q.c.limit_key.in_(chunk), due(now), _not_in(q.c.queue, free["paused_queues"]))
    for name in sorted(t for t, v in full.items() if None in v):
        _add(conn, out, "limited", cap, q.c.status == Status.PENDING, q.c.type == name,
             q.c.limit_key.is_(None), due(now), _not_in(q.c.queue, free["paused_queues"]))


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
            _add(conn, out, "limited", cap, q.c.queue == name, due(now),
                 _not_in(q.c.type, sorted(free["skip_types"])))


def _add(conn: Connection, out: dict, reason: str, cap: int, *conds: ColumnElement) -> None:
    """Count (per queue and type) the first `cap` + 1 due rows matching `conds`; rows
    already counted under an earlier reason are excluded by the caller's conditions."""
    due_at = func.coalesce(q.c.scheduled_at, q.c.created_at)
    inner = select(q.c.queue, q.c.type, due_at.label("due_at")).where(*conds).limit(
        cap + 1).subquery()
    stmt = select(inner.c.queue, inner.c.type, func.count(), func.min(inner.c.due_at)).group_by(
        inner.c.queue, inner.c.type)
    rows = conn.execute(stmt).all()
    capped = sum(r[2] for r in rows) > cap
    for queue, job_type, n, oldest in rows:
        entry = out.setdefault((queue, job_type, reason),
                               {"rows": 0, "capped": False, "oldest_due_at": None})
        entry["rows"] += n
        entry["capped"] = entry["capped"] or capped
        if oldest is not None:
            entry["oldest_due_at"] = min(oldest, entry["oldest_due_at"] or oldest)


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
