"""Flow control's limits as numbers: `FlowControl` (what a claimer enforces) and `Budget`
(what may still start now), counted once and walked by the claim (`claim.claim_jobs`)
and by the held-rows views (`held.held_rows`) alike.

Inside the claim's transaction, from the rows themselves (docs/flow-control.md):

- **pauses and blocks**: the candidate SELECT's hold condition (`flow.claim_hold_sql`:
  one NOT EXISTS on each flow table per candidate, behind a guard read once per
  statement), so held rows are skipped in the SELECT and the rows behind them are
  reached. While neither table holds a row (as it is unless something is paused or
  blocked) the SELECT leaves the condition out and returns the probe
  `flow.HOLDS_STORED_SQL` instead (two uncorrelated reads, once per statement: half
  of what the condition costs MariaDB's optimiser); a probe that finds a row stored
  makes the claim take none of those candidates and select again, in the same
  transaction, with the condition — and the claimer's next claims carry it
  (`ClaimRequest.holds_stored`, from `Claim.holds_stored`) until a probe finds both
  tables empty again;
- **limits** (a handler's CONCURRENCY / RATE_LIMIT, per LIMIT_KEY; a queue's settings):
  the claimer locks the limiter row of each limit it enforces, FOR UPDATE in name order
  (claimers of one limit take turns; one order: no deadlock), then counts the `running`
  rows per type and key (index `ix_cronjob_queue_limit`) and reads the starts in the
  rolling window (`cronjob_flow_start`, `rates.rate_states`). A queue's limits are locked and
  counted before the first SELECT; a handler's only once the first candidates hold a
  row of a limited type (a claim that meets none locks nothing: the counts are read
  after the locks, and each statement reads what is committed, READ COMMITTED, so they
  are never stale).
  `Budget.admit` takes at most what is left of each bucket, walking the candidates in
  claim order; the next round excludes the full buckets in the SELECT (`exclude_sql`)
  and refills the slots from other keys. The views of held rows walk the due rows with
  the same `Budget`, counted the same way without locking or pruning. Nothing is ever counted
  up or down: a row killed with `kill -9` stops counting when recover-stale takes it
  back (it is no longer `running`).

**Rates are spaced**: a rate of N per window admits one start of a key at a time, at
least window/N after the key's previous start (and never more than N in a rolling
window), so a claim takes at most one row of a rated key and the starts of `"10/s"` come
one every 0.1 s instead of ten together at each window's edge. A claim that met a rate
tells when its next start is admitted (`Claim.retry_seconds`): the worker claims again then.

**Which clock**: with the system clock (`flow.uses_db_clock`) the start log is written
and the windows judged with the database's clock, in the statements themselves (as
leases are; `sql.now_sql`), so hosts whose clocks disagree share one window; an injected
clock (a `FrozenClock` in tests) drives them with its `now` instead.

A row without a key is in its type's keyless bucket. A claim by id (an operator's "run
it now") honours pauses, blocks and the type's limits, not the queue's (it names no
queue). Without limits, pauses or blocks flow control adds only the probe to the SELECT:
one round, no lock, no statement of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from ..flow.rules import Limits
from .models import cronjob_flow_start as fs
from .models import cronjob_limiter as lim
from .models import cronjob_queue as q
from .rates import NO_KEY, RateState, prune_starts, rate_states, spacing
from .sql import db_now, insert_ignore, lock_sql, ph

ROUNDS = 4
Bucket = tuple[str, "str | None"]  # (job type, limit key; None: keyless or not keyed)


@dataclass(frozen=True)
class FlowControl:
    """What a claimer enforces besides the due condition: pauses and blocks always, and
    the limits below (`flowrules`), decided in the claim transaction.

    Attributes:
        type_limits: `{job type: Limits}` of the handlers this claimer runs (limited ones
            only; others are dropped).
        queue_limits: `{queue: Limits}` from the settings (`[queues.<queue>]`).
        wait_for_holds: a short claim reports rows held while any pause or block is live
            (`Claim.held`: a worker claims again within a second); False: only when it met
            a limit (a burst, which reports paused and blocked rows as held instead).
        db_clock: judge pauses, blocks and rate windows with the database's clock (the
            App's clock is the system clock: `flow.uses_db_clock`); False: with each
            claim's `now` (an injected clock).
    """

    type_limits: Mapping[str, Limits] = field(default_factory=dict)
    queue_limits: Mapping[str, Limits] = field(default_factory=dict)
    wait_for_holds: bool = True
    db_clock: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "type_limits",
                           {t: lm for t, lm in self.type_limits.items() if lm})
        object.__setattr__(self, "queue_limits",
                           {n: lm for n, lm in self.queue_limits.items() if lm})

    @property
    def rounds(self) -> int:
        """SELECTs one claim may run: a second selects with the hold condition when a probe
        found it needed; more refill slots a limit left empty."""
        return ROUNDS if self.type_limits or self.queue_limits else 2

    def key(self, row: Mapping) -> str | None:
        """The bucket key of `row`: its limit key for a keyed type, else None."""
        limits = self.type_limits.get(row["type"])
        return row.get("limit_key") if limits is not None and limits.keyed else None


@dataclass
class Room:
    """What one limit (a type's bucket, or a queue) still admits now.

    Attributes:
        concurrency: more rows that may run (None: no concurrency limit).
        rate: more starts the rate admits now (None: no rate limit).
        wait: seconds until the rate admits its next start, when it admits none.
        spacing: seconds between two starts under the rate (None: no rate).
        busy: its concurrency was full before any row was taken (N rows running).
    """

    concurrency: int | None
    rate: int | None
    wait: float | None = None
    spacing: float | None = None
    busy: bool = False

    def full(self) -> bool:
        """True when it admits no row now."""
        return ((self.concurrency is not None and self.concurrency <= 0)
                or (self.rate is not None and self.rate <= 0))

    def reason(self) -> str:
        """Why a full room refuses: `limited` when its concurrency is taken by rows that
        were running before (`busy`), or when its rate would still admit one; else
        `rate_limited` (a rate that admits none now: its rows come free by the clock)."""
        if self.concurrency is not None and self.concurrency <= 0 and (
                self.busy or self.rate is None or self.rate > 0):
            return "limited"
        return "rate_limited"

    def take(self) -> None:
        """One row starts: one less of each; its rate's next start is a spacing on."""
        if self.concurrency is not None:
            self.concurrency -= 1
        if self.rate is not None:
            self.rate -= 1
            self.wait = self.spacing


def fresh_room(limits: Limits) -> Room:
    """The room of a bucket with nothing running and no start in its window (a rate
    admits one start at a time)."""
    return Room(limits.concurrency, 1 if limits.rate else None, None,
                spacing(limits.rate).total_seconds() if limits.rate else None)


@dataclass
class Budget:
    """What may still start now under the limits of a `FlowControl`: per type bucket
    (`(type, key)`) and, for a claim of a limited queue, for the whole queue. `admit` walks
    rows in claim order; the claim and the held-rows views walk the same way.

    Attributes:
        flow: the limits.
        rooms: the counted buckets (running rows and window starts read); a bucket not
            here has its `fresh_room`.
        queue: the room of the queue being claimed (None: no queue limit).
        queue_name: that queue.
    """

    flow: FlowControl
    rooms: dict[Bucket, Room] = field(default_factory=dict)
    queue: Room | None = None
    queue_name: str | None = None

    def room(self, row: Mapping) -> Room | None:
        """The room of `row`'s type bucket (None: its type has no limit)."""
        limits = self.flow.type_limits.get(row["type"])
        if limits is None:
            return None
        bucket = (row["type"], self.flow.key(row))
        found = self.rooms.get(bucket)
        if found is None:
            found = self.rooms[bucket] = fresh_room(limits)
        return found

    def admit(self, row: Mapping) -> tuple[str, str] | None:
        """Take `row` if its bucket and the queue have room (both shrink by one); else
        `(reason, limiter)`: `limited` or `rate_limited`, and `type:<type>` or
        `queue:<queue>`, the bucket's refusal named before the queue's."""
        room = self.room(row)
        if room is not None and room.full():
            return room.reason(), f"type:{row['type']}"
        if self.queue is not None and self.queue.full():
            return self.queue.reason(), f"queue:{self.queue_name}"
        if room is not None:
            room.take()
        if self.queue is not None:
            self.queue.take()
        return None

    def full(self) -> set[Bucket]:
        """The counted buckets that admit no row now."""
        return {b for b, r in self.rooms.items() if r.full()}

    def wait(self, bucket: Bucket | None) -> float | None:
        """Seconds until the rate of `bucket` (None: the queue's) admits a start, if known."""
        room = self.queue if bucket is None else self.rooms.get(bucket)
        return None if room is None else room.wait


def count_budget(conn: Connection, dialect: str, flow: FlowControl, now: datetime, *,
                 queue: str | None = None, claiming: bool = True) -> Budget:
    """Count what may start now: the running rows per type bucket and the window starts of
    every rate of `flow`, and `queue`'s limits when it has any.

    Args:
        conn: a connection (the claim's transaction when `claiming`).
        dialect: `sql.name(conn)`.
        now: naive UTC, the claiming instant (ignored for windows with `flow.db_clock`).
        queue: the queue being claimed (or viewed); None: no queue limit counted.
        claiming: lock the limiter rows first (FOR UPDATE, name order: claimers of one
            limit take turns) and prune the start log; False (a view): read only.

    Returns:
        A `Budget` whose `rooms` hold every bucket with a row running or a start in the
        window.
    """
    limits_q = flow.queue_limits.get(queue) if queue else None
    if claiming:
        names = sorted([f"type:{t}" for t in flow.type_limits]
                       + ([f"queue:{queue}"] if limits_q else []))
        lock_limiters(conn, dialect, names, now)
    budget = Budget(flow, queue_name=queue)
    running: Counter = Counter()
    for (job_type, key), n in running_counts(conn, dialect, list(flow.type_limits)).items():
        running[(job_type, key if flow.type_limits[job_type].keyed else None)] += n
    for job_type, limits in flow.type_limits.items():
        rates = _rates(conn, f"type:{job_type}", limits, now, flow.db_clock, claiming)
        for key in {k for t, k in running if t == job_type} | set(rates):
            budget.rooms[(job_type, key)] = _room(limits, running.get((job_type, key), 0),
                                                  rates.get(key))
    budget.queue = queue_room(conn, dialect, flow, queue, now, claiming=claiming)
    return budget


def queue_room(conn: Connection, dialect: str, flow: FlowControl, queue: str | None,
               now: datetime, *, claiming: bool = True) -> Room | None:
    """The room of `queue`'s own limits now (None: it has none); `claiming` as in
    `count_budget` (the caller locked its limiter row)."""
    limits = flow.queue_limits.get(queue) if queue else None
    if limits is None:
        return None
    running = queue_running(conn, dialect, queue) if limits.concurrency else 0
    rate = _rates(conn, f"queue:{queue}", limits, now, flow.db_clock, claiming).get(None)
    return _room(limits, running, rate)


def _rates(conn: Connection, limiter: str, limits: Limits, now: datetime, db_clock: bool,
           claiming: bool) -> dict[str | None, RateState]:
    if not limits.rate:
        return {}
    if claiming:
        prune_starts(conn, limiter, limits.rate, now, db_clock=db_clock)
    return rate_states(conn, limiter, limits.rate, now, db_clock=db_clock)


def _room(limits: Limits, running: int, rate: RateState | None) -> Room:
    room = fresh_room(limits)
    if limits.concurrency:
        room.concurrency = limits.concurrency - running
        room.busy = room.concurrency <= 0
    if rate is not None:
        room.rate = rate.admits
        room.wait = None if rate.admits else rate.next_in_seconds
    return room


def log_starts(conn: Connection, flow: FlowControl, queue: str | None, now: datetime,
               taken: list[dict]) -> None:
    """Log the starts of the rate-limited rows among `taken` (a claim's, of `queue`), in
    the start log the rates read (`rates.rate_states`)."""
    entries = [(f"type:{row['type']}", flow.key(row) or NO_KEY) for row in taken
               if (lm := flow.type_limits.get(row["type"])) is not None and lm.rate]
    limits_q = flow.queue_limits.get(queue) if queue else None
    if limits_q is not None and limits_q.rate:
        entries += [(f"queue:{queue}", NO_KEY)] * len(taken)
    if entries:
        stmt = fs.insert().values(started_at=db_now(conn)) if flow.db_clock else fs.insert()
        at = {} if flow.db_clock else {"started_at": now}
        conn.execute(stmt, [{"limiter": limiter, "limit_key": key, **at}
                            for limiter, key in entries])


def exclude_sql(dialect: str, full: set[Bucket], type_limits: Mapping[str, Limits]
                ) -> tuple[str, dict[str, Any]]:
    """Driver SQL on `cronjob_queue` excluding the buckets in `full` (keyed types: per key;
    others: the type), and its parameters (`p_t<n>`, `p_k<n>_<i>`); `""` for none."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    by_type: dict[str, list[str | None]] = {}
    for job_type, key in sorted(full, key=lambda b: (b[0], b[1] or "")):
        by_type.setdefault(job_type, []).append(key)
    for n, (job_type, keys) in enumerate(by_type.items()):
        params[f"p_t{n}"] = job_type
        t = ph(dialect, f"p_t{n}")
        if not type_limits[job_type].keyed:
            parts.append(f"type <> {t}")
            continue
        named = [k for k in keys if k is not None]
        conds = []
        if named:
            for i, key in enumerate(named):
                params[f"p_k{n}_{i}"] = key
            # `IS NOT NULL` first: a row without a key must not make the condition NULL
            # (NOT (... IN ...) is NULL for it, and the SELECT would skip it).
            conds.append("limit_key IS NOT NULL AND limit_key IN (" + ", ".join(
                ph(dialect, f"p_k{n}_{i}") for i in range(len(named))) + ")")
        if None in keys:
            conds.append("limit_key IS NULL")
        parts.append(f"NOT (type = {t} AND ({' OR '.join(f'({c})' for c in conds)}))")
    return " AND ".join(parts), params


def lock_limiters(conn: Connection, dialect: str, names: list[str], now: datetime) -> None:
    """Lock the limiter rows `names` (sorted) FOR UPDATE, making missing ones first.
    SQLite has one writer at a time: nothing to lock."""
    if dialect == "sqlite" or not names:
        return
    marks = ", ".join(ph(dialect, f"n{i}") for i in range(len(names)))
    params = {f"n{i}": n for i, n in enumerate(names)}
    sql = (f"SELECT name FROM {lim.name} WHERE name IN ({marks}) ORDER BY name"
           f"{lock_sql(dialect, skip=False)}")
    found = {r[0] for r in conn.exec_driver_sql(sql, params)}
    missing = [n for n in names if n not in found]
    if missing:
        conn.execute(insert_ignore(conn, lim, ["name"]),
                     [{"name": n, "created_at": now} for n in missing])
        conn.exec_driver_sql(sql, params)


def running_counts(conn: Connection, dialect: str,
                   types: list[str]) -> dict[tuple[str, str | None], int]:
    """`{(type, limit key or None): rows running}` of `types`."""
    if not types:
        return {}
    marks = ", ".join(ph(dialect, f"t{i}") for i in range(len(types)))
    sql = (f"SELECT type, limit_key, COUNT(*) FROM {q.name} WHERE status = 'running' "
           f"AND type IN ({marks}) GROUP BY type, limit_key")
    rows = conn.exec_driver_sql(sql, {f"t{i}": t for i, t in enumerate(types)})
    return {(t, k): n for t, k, n in rows}


def queue_running(conn: Connection, dialect: str, queue: str) -> int:
    """The rows of `queue` running now."""
    sql = (f"SELECT COUNT(*) FROM {q.name} WHERE queue = {ph(dialect, 'queue')} "
           f"AND status = 'running'")
    return conn.exec_driver_sql(sql, {"queue": queue}).scalar_one()
