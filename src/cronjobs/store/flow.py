"""Flow control's own rows: pauses (a queue, a job type, a scheduled task) and blocks (a
job type, or one limit key of it, until a time), and what waits behind them.

Every claim's candidate SELECT reads whether a pause or block is stored
(`HOLDS_STORED_SQL`, the probe: two uncorrelated reads, once per statement) and, when
one is, carries the hold condition (`claim_hold_sql`: one NOT EXISTS on each table per
candidate, behind the same guard); a SELECT that left the condition out and finds a row
stored is taken again with it (`claim.claim_jobs`). It runs in the claim's statement,
so a pause or a block made by any process holds for every worker from its next claim,
with nothing cached. The pause and block conditions are written once (`_PAUSED`,
`_BLOCKED`): the claim's text and the views' Core clauses (`paused`, `blocked`, read by
`held`) are the same SQL. Expired pauses and blocks hold nothing; `prune_expired` deletes them
(so does every new pause or block), keeping the tables empty when nothing is held: the
SELECT then reads no flow row per candidate. All times naive UTC.

Which clock: a pause's or block's `until` is written and compared with the database's
clock, as leases are (`flow_now`; `claim_hold_sql(db_clock=True)` reads it in the claim's
statement), so a host whose clock is off neither ends a block early nor makes a pause that
no other host honours. An injected clock that is not the system clock (a `FrozenClock` in
tests, a simulation) drives everything instead: its `now` is bound as a parameter.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
    bindparam,
    delete,
    func,
    or_,
    select,
    text,
    type_coerce,
    update,
)
from sqlalchemy.sql import ColumnElement

from .. import limits
from ..clock import SystemClock
from ..errors import InvalidJob
from .models import UtcDateTime
from .models import cronjob_block as b
from .models import cronjob_flow_start as fs
from .models import cronjob_pause as p
from .models import cronjob_queue as q
from .sql import bind, database_now, db_now, due, insert_ignore, now_sql, ph

SCOPES = ("queue", "type", "task")
# True while no pause and no block row is stored (the guard of `claim_hold_sql`).
NO_HOLDS_STORED_SQL = (f"(NOT EXISTS (SELECT 1 FROM {p.name}) AND NOT EXISTS (SELECT 1 FROM "
                       f"{b.name}))")
# 1 while a pause or a block row is stored (live or ended, not yet pruned), else 0: the
# claim's probe, a column of its candidate SELECT (`claim.claim_jobs`).
HOLDS_STORED_SQL = f"CASE WHEN {NO_HOLDS_STORED_SQL} THEN 0 ELSE 1 END"
WHOLE_TYPE = ""  # `cronjob_block.limit_key` of a block of the whole type
# The hold conditions on `cronjob_queue` (`{now}`: the SQL of the judging instant), each
# written once and served to the claim as driver SQL (`hold_sql`) and to the views of
# held rows as Core (`paused`, `blocked`), as `sql.due_sql` / `sql.due` are.
_PAUSED = (f"EXISTS (SELECT 1 FROM {p.name} fp WHERE ((fp.scope = 'queue' AND "
           f"fp.name = {q.name}.queue) OR (fp.scope = 'type' AND fp.name = {q.name}.type)) "
           f"AND (fp.until_at IS NULL OR fp.until_at > {{now}}))")
_BLOCKED = (f"EXISTS (SELECT 1 FROM {b.name} fb WHERE fb.type = {q.name}.type AND "
            f"fb.limit_key IN ('', {q.name}.limit_key) AND fb.until_at > {{now}})")


def uses_db_clock(clock: object) -> bool:
    """Whether flow control judges time with the database's clock for `clock` (an App's):
    True for the system clock; False for an injected one (a `FrozenClock`), whose `now`
    then drives pauses, blocks and rate windows."""
    return isinstance(clock, SystemClock)


def flow_now(conn: Connection, clock) -> datetime:
    """Now for a pause's or block's `until` (naive UTC): the database's clock (one round
    trip) when `uses_db_clock(clock)`, else `clock.now()`."""
    return database_now(conn) if uses_db_clock(clock) else clock.now()


def judged_at(conn: Connection, clock, at: datetime) -> datetime:
    """`at` (naive UTC, an instant of `clock`: a tick's, maybe `tick --now`'s) moved onto
    the database's clock when `uses_db_clock(clock)` (by the host's offset from it: one
    round trip), so a host whose clock is off judges a pause's `until` as the others do;
    `at` itself for an injected clock."""
    if not uses_db_clock(clock):
        return at
    return at + (database_now(conn) - clock.now())


def pause(conn: Connection, scope: str, name: str, *, now: datetime,
          until: datetime | None = None, reason: str | None = None, by: str) -> dict:
    """Pause queue, job type or task `name` (replacing its pause, if any): its rows wait
    (running ones finish), keeping their order and attempts.

    Args:
        scope: `queue`, `type` or `task`.
        name: the queue name, job type or task name.
        now: naive UTC, written as `created_at`.
        until: naive UTC end of the pause, after `now`; None: until resumed.
        reason: why (cut to 500 bytes); by: who (`user@host`, at most 64 characters).

    Returns:
        The pause as `list_pauses` gives it.

    Raises:
        InvalidJob: a bad scope, name, `by`, or an `until` not after `now`.
    """
    check_target(scope, name)
    by = limits.check_name(by, "pause author", limits.FLOW_BY_MAX_CHARS)
    prune_expired(conn, now)
    if until is not None and until <= now:
        raise InvalidJob(f"a pause must end after now ({now:%Y-%m-%d %H:%M:%S} UTC), "
                         f"got until {until:%Y-%m-%d %H:%M:%S}")
    values = {"reason": _reason(reason), "created_by": by, "created_at": now, "until_at": until}
    added = conn.execute(insert_ignore(conn, p, ["scope", "name"]).values(
        scope=scope, name=name, **values).execution_options(preserve_rowcount=True)).rowcount
    # (psycopg 3 drops an INSERT's rowcount unless SQLAlchemy is asked to keep it)
    if not added:
        conn.execute(update(p).where(p.c.scope == scope, p.c.name == name).values(**values))
    return {"scope": scope, "name": name, "reason": values["reason"], "created_by": by,
            "created_at": now, "until": until}


def resume(conn: Connection, scope: str, name: str) -> int:
    """Lift the pause of queue, type or task `name` (`scope` as in `pause`).

    Returns:
        1 if a pause was lifted (live or expired), 0 if there was none.

    Raises:
        InvalidJob: a bad scope or name.
    """
    check_target(scope, name)
    return conn.execute(delete(p).where(p.c.scope == scope, p.c.name == name)).rowcount


def list_pauses(conn: Connection, now: datetime) -> list[dict]:
    """The live pauses at `now` (naive UTC), oldest first.

    Returns:
        Dicts with `scope` (queue | type | task), `name`, `reason` (or None),
        `created_by`, `created_at` and `until` (naive UTC, None: until resumed).
    """
    rows = conn.execute(select(p).where(_live_pause(now)).order_by(p.c.created_at, p.c.name))
    return [{"scope": r.scope, "name": r.name, "reason": r.reason, "created_by": r.created_by,
             "created_at": r.created_at, "until": r.until_at} for r in rows]


def is_task_paused(conn: Connection, name: str, now: datetime) -> bool:
    """Whether scheduled task `name` has a live pause at `now` (naive UTC): its slots
    start nothing (the scheduler records them as skipped)."""
    found = conn.execute(select(p.c.name).where(
        p.c.scope == "task", p.c.name == name, _live_pause(now))).first()
    return found is not None


def block(conn: Connection, job_type: str, limit_key: str | None = None, *, now: datetime,
          until: datetime, reason: str | None = None) -> dict:
    """Block rows of `job_type` with `limit_key` (None: every row of the type) until
    `until`: they stay pending, keeping their order and attempts. An existing block of
    the same type and key is extended to `until` (with this reason), never shortened.

    Args:
        job_type: the job type; limit_key: the key (at most 191 characters) or None.
        now: naive UTC, the block's `created_at` when it is new or extended.
        until: naive UTC end; reason: why (cut to 500 bytes).

    Returns:
        The block as it stands after the call, as `list_blocks` gives it.

    Raises:
        InvalidJob: a bad type or key.
    """
    limits.check_name(job_type, "job type", limits.TYPE_MAX_CHARS)
    key = WHOLE_TYPE if limit_key is None else limits.check_name(
        limit_key, "limit key", limits.LIMIT_KEY_MAX_CHARS)
    values = {"until_at": until, "reason": _reason(reason), "created_at": now}
    conn.execute(delete(b).where(b.c.until_at <= now, or_(b.c.type != job_type,
                                                           b.c.limit_key != key)))
    added = conn.execute(insert_ignore(conn, b, ["type", "limit_key"]).values(
        type=job_type, limit_key=key, **values).execution_options(preserve_rowcount=True)
    ).rowcount
    if not added:  # extend, never shorten: one conditional UPDATE, safe against a racer
        conn.execute(update(b).where(b.c.type == job_type, b.c.limit_key == key,
                                     b.c.until_at < until).values(**values))
    row = conn.execute(select(b).where(b.c.type == job_type, b.c.limit_key == key)).one()
    return _block_dict(row)


def unblock(conn: Connection, block_id: int | None = None, *, job_type: str | None = None,
            limit_key: str | None = None) -> int:
    """Lift block `block_id`, or the block of `job_type` and `limit_key` (None: the
    block of the whole type).

    Returns:
        How many blocks were deleted (0 or 1).

    Raises:
        ValueError: neither or both of `block_id` and `job_type`.
    """
    if (block_id is None) == (job_type is None):
        raise ValueError(f"unblock takes a block id or a job type, got id={block_id!r} "
                         f"and type={job_type!r}")
    if block_id is not None:
        return conn.execute(delete(b).where(b.c.id == int(block_id))).rowcount
    key = WHOLE_TYPE if limit_key is None else limit_key
    return conn.execute(delete(b).where(b.c.type == job_type, b.c.limit_key == key)).rowcount


def list_blocks(conn: Connection, now: datetime) -> list[dict]:
    """The live blocks at `now` (naive UTC), ending soonest first.

    Returns:
        Dicts with `id`, `type`, `limit_key` (None: the whole type), `until` (naive
        UTC), `reason` (or None) and `created_at`.
    """
    rows = conn.execute(select(b).where(b.c.until_at > now).order_by(b.c.until_at, b.c.id))
    return [_block_dict(r) for r in rows]


def prune_expired(conn: Connection, now: datetime) -> dict[str, int]:
    """Delete the pauses and blocks that ended at or before `now` (naive UTC), and the
    start-log entries older than the longest rate window (an hour): those of a limit
    that is no longer configured, which no claim prunes.

    Returns:
        `{"pauses": n, "blocks": n, "starts": n}`: how many were deleted.
    """
    pauses = conn.execute(delete(p).where(p.c.until_at <= now)).rowcount
    blocks = conn.execute(delete(b).where(b.c.until_at <= now)).rowcount
    starts = conn.execute(delete(fs).where(
        fs.c.started_at <= now - timedelta(hours=1))).rowcount
    return {"pauses": pauses, "blocks": blocks, "starts": starts}


def block_type(conn: Connection, block_id: int) -> str | None:
    """The job type of block `block_id`, or None when there is no such block."""
    return conn.execute(select(b.c.type).where(b.c.id == int(block_id))).scalar()


def due_queues(conn: Connection, now: datetime, *, queue: str | None = None,
               types: list[str] | None = None) -> dict[str, int]:
    """`{queue: the id of one of its due pending rows}`: `queue` if it has one, else the
    queues of the due rows of `types` (the lowest id of each): the queues to ring once a
    pause or a block is lifted (its rows wait for no doorbell of their own). One row of
    the queue is read (its backlog may be long); a type's due rows are grouped."""
    if queue is not None:
        first = conn.execute(select(q.c.id).where(q.c.queue == queue, due(now)).limit(1)
                             ).scalar()
        return {} if first is None else {queue: int(first)}
    stmt = (select(q.c.queue, func.min(q.c.id)).where(due(now), q.c.type.in_(types or []))
            .group_by(q.c.queue))
    return {name: int(job_id) for name, job_id in conn.execute(stmt)}


def holds_end_in(conn: Connection, now: datetime | None) -> tuple[bool, float | None]:
    """Whether any pause or block is live, and in how many seconds the soonest of those
    with an end ends (None: none has one). `now`: naive UTC; None: the database's clock.
    Two tiny reads."""
    at = db_now(conn) if now is None else now
    live, soonest = False, None
    for table, cond in ((p, _live_pause(at)), (b, b.c.until_at > at)):
        columns = [func.min(table.c.until_at), func.count()] + ([at] if now is None else [])
        until, count, *then = conn.execute(select(*columns).where(cond)).one()
        live = live or count > 0
        if until is not None:
            until, ref = (datetime.fromisoformat(v) if isinstance(v, str) else v
                          for v in (until, then[0] if then else now))
            left = max(0.0, (until - ref).total_seconds())
            soonest = left if soonest is None else min(soonest, left)
    return live, soonest


@functools.lru_cache(maxsize=8)
def claim_hold_sql(dialect: str, db_clock: bool = False) -> str:
    """The claim's hold condition (driver SQL on `cronjob_queue`, placeholder `p_now`, or
    with `db_clock` the database's clock and no placeholder):
    `hold_sql` behind a guard, `NO_HOLDS_STORED_SQL`, that is true for every row while
    neither table holds a row (live or ended, not yet pruned). The guard's two
    uncorrelated NOT EXISTS are read once per statement, so with nothing stored the
    candidate SELECT costs about what it costs without a condition, and the claim needs
    no round trip of its own to learn whether anything is held."""
    return f"({NO_HOLDS_STORED_SQL} OR ({hold_sql(dialect, db_clock)}))"


def hold_sql(dialect: str, db_clock: bool = False) -> str:
    """Driver SQL on `cronjob_queue` (unqualified columns; placeholder `p_now`, or with
    `db_clock` the database's clock, `sql.now_sql`): true for a row that no live pause of
    its queue or type and no live block of its type (whole, or its limit key) holds. One
    NOT EXISTS per row on each tiny table."""
    now = now_sql(dialect) if db_clock else ph(dialect, "p_now")
    return f"NOT {_PAUSED.format(now=now)} AND NOT {_BLOCKED.format(now=now)}"


def paused(now: datetime) -> ColumnElement:
    """The claim's pause condition (`hold_sql`'s first half) as a SQLAlchemy Core clause
    on `cronjob_queue`, `now` bound (naive UTC): a live pause of the row's queue or type."""
    return _clause(_PAUSED, now)


def blocked(now: datetime) -> ColumnElement:
    """The claim's block condition (`hold_sql`'s second half) as Core, `now` bound (naive
    UTC): a live block of the row's type, whole or of its limit key."""
    return _clause(_BLOCKED, now)


def _clause(condition: str, now: datetime) -> ColumnElement:
    clause = text(condition.format(now=":held_at")).bindparams(
        bindparam("held_at", now, type_=UtcDateTime, unique=True))
    return type_coerce(clause, Boolean)


def hold_params(dialect: str, now: datetime, db_clock: bool = False) -> dict[str, Any]:
    """The parameters of `hold_sql` at `now` (naive UTC); none with `db_clock`."""
    return {} if db_clock else {"p_now": bind(dialect, now)}


def _live_pause(now: datetime):
    return or_(p.c.until_at.is_(None), p.c.until_at > now)


def check_target(scope: str, name: str) -> None:
    """Refuse a pause target that could never be valid: a scope other than `queue`, `type`
    or `task`, or a name that breaks its rules (`limits.check_queue`, `check_name`).
    Whether any handler has the name is the caller's concern (a pause of a name only
    other workers run still holds).

    Raises:
        InvalidJob: naming the problem and the value.
    """
    if scope not in SCOPES:
        raise InvalidJob(f"pause scope must be one of {', '.join(SCOPES)}, got {scope!r:.40}")
    if scope == "queue":
        limits.check_queue(name)
    else:
        limits.check_name(name, "job type" if scope == "type" else "task name",
                          limits.TYPE_MAX_CHARS)


def _reason(reason: str | None) -> str | None:
    return None if reason is None else limits.cut(str(reason), limits.FLOW_REASON_MAX_BYTES)


def _block_dict(row) -> dict:
    return {"id": row.id, "type": row.type,
            "limit_key": None if row.limit_key == WHOLE_TYPE else row.limit_key,
            "until": row.until_at, "reason": row.reason, "created_at": row.created_at}
