"""Flow control in the claim: `FlowPolicy`, the `ClaimPolicy` of every executor.

Inside the claim's transaction, from the rows themselves (docs/flow-control.md):

- **pauses and blocks**: the candidate SELECT's hold condition (`flow.claim_hold_sql`:
  one NOT EXISTS on each flow table per candidate, behind a guard read once per
  statement), so held rows are skipped in the SELECT and the rows behind them are
  reached. While neither table holds a row (as it is unless something is paused or
  blocked) the SELECT leaves the condition out and returns the probe
  `flow.HOLDS_STORED_SQL` instead (two uncorrelated reads, once per statement: half
  of what the condition costs MariaDB's optimiser); a probe that finds a row stored
  makes the claim take none of those candidates and select again, in the same
  transaction, with the condition — and the policy's next claims carry it until a
  probe finds both tables empty again;
- **limits** (a handler's CONCURRENCY / RATE_LIMIT, per LIMIT_KEY; a queue's settings):
  the claimer locks the limiter row of each limit it enforces, FOR UPDATE in name order
  (claimers of one limit take turns; one order: no deadlock), then counts the `running`
  rows per type and key (index `ix_cronjob_queue_limit`) and reads the starts in the
  rolling window (`cronjob_flow_start`, `rates.rate_states`). A queue's limits are locked and
  counted before the first SELECT; a handler's only once the first candidates hold a
  row of a limited type (a claim that meets none locks nothing: the counts are read
  after the locks, and each statement reads what is committed, READ COMMITTED, so they
  are never stale).
  `accept` takes at most what is left of each bucket; the next round excludes the full
  buckets in the SELECT and refills the slots from other keys. Nothing is ever counted
  up or down: a row killed with `kill -9` stops counting when recover-stale takes it
  back (it is no longer `running`).

**Rates are spaced**: a rate of N per window admits one start of a key at a time, at
least window/N after the key's previous start (and never more than N in a rolling
window), so a claim takes at most one row of a rated key and the starts of `"10/s"` come
one every 0.1 s instead of ten together at each window's edge. A claim that met a rate
tells when its next start is admitted (`retry_seconds`): the worker claims again then.

**Which clock**: with the system clock (`flow.uses_db_clock`) the start log is written
and the windows judged with the database's clock, in the statements themselves (as
leases are; `sql.now_sql`), so hosts whose clocks disagree share one window; an injected
clock (a `FrozenClock` in tests) drives them with its `now` instead.

A row without a key is in its type's keyless bucket. A claim by id (an operator's "run
it now") honours pauses, blocks and the type's limits, not the queue's (it names no
queue). Without limits, pauses or blocks the policy adds only the probe to the SELECT:
one round, no lock, no statement of its own.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from ..flowrules import Limits
from ..models import cronjob_flow_start as fs
from ..models import cronjob_limiter as lim
from ..models import cronjob_queue as q
from .claim import ClaimPolicy, ClaimRequest
from .flow import HOLDS_STORED_SQL, claim_hold_sql, hold_params, holds_end_in
from .rates import NO_KEY, RateState, prune_starts, rate_states, spacing
from .sql import db_now, insert_ignore, lock_sql, name, ph

ROUNDS = 4


@dataclass
class _Budget:
    """What one claim may still take: per (type, key) and for the whole queue, and when a
    rate that holds a bucket admits its next start (seconds)."""

    full: set[tuple[str, str | None]] = field(default_factory=set)
    left: dict[tuple[str, str | None], int] = field(default_factory=dict)
    queue_left: int | None = None
    wait: dict[tuple[str, str | None], float] = field(default_factory=dict)
    queue_wait: float | None = None


_UNCOUNTED = _Budget()  # a claim's first round, before any limited row was seen


class FlowPolicy(ClaimPolicy):
    """Pauses, blocks and limits, decided in the claim transaction.

    Args:
        type_limits: `{job type: Limits}` of the handlers this claimer runs (limited ones).
        queue_limits: `{queue: Limits}` from the settings (`[queues.<queue>]`).
        wait_for_holds: `holding` is also True while any pause or block is live (a
            worker claims again within a second); False: only after a claim met a limit
            (a burst, which reports paused and blocked rows as held instead of waiting).
        db_clock: judge pauses, blocks and rate windows with the database's clock (the
            App's clock is the system clock: `flow.uses_db_clock`); False: with each
            claim's `now` (an injected clock).
    """

    def __init__(self, type_limits: Mapping[str, Limits] | None = None,
                 queue_limits: Mapping[str, Limits] | None = None, *,
                 wait_for_holds: bool = True, db_clock: bool = False) -> None:
        self.wait_for_holds = wait_for_holds
        self.db_clock = db_clock
        self.type_limits = {t: lm for t, lm in (type_limits or {}).items() if lm}
        self.queue_limits = {n: lm for n, lm in (queue_limits or {}).items() if lm}
        # A second round selects with the hold condition when a probe found it needed.
        self.rounds = ROUNDS if self.type_limits or self.queue_limits else 2
        self._stored = False  # the last probe found a pause or block stored (any thread)
        self._local = threading.local()  # the budget of this thread's claim in progress

    def where(self, conn: Connection, request: ClaimRequest) -> tuple[str, dict[str, Any]]:
        """The hold condition (`flow.claim_hold_sql`), and the exclusion of
        buckets at their limit: a queue's limits are locked and counted before the first
        SELECT, a handler's once a round met a row of a limited type (`accept`). See the
        module docstring."""
        dialect = name(conn)
        first = getattr(self._local, "request", None) is not request
        if first:
            self._local.request = request
            self._local.recheck = False
            self._local.wait = None
        self._local.lean = not (self._stored or self._local.recheck)
        hold, held = (("", {}) if self._local.lean else
                      (claim_hold_sql(dialect, self.db_clock),
                       hold_params(dialect, request.now, self.db_clock)))
        queue = self.queue_limits.get(request.queue) if request.queue else None
        if not self.type_limits and queue is None:
            self._local.budget = None
            return hold, held
        if first and queue is None:
            self._local.budget = _UNCOUNTED  # counted in `accept`, if a limited row comes
            return hold, held
        budget = self._count(conn, dialect, request, queue)
        self._local.budget = budget
        if budget.full or (budget.queue_left is not None and budget.queue_left <= 0):
            self._local.limited = True
        if budget.queue_left is not None and budget.queue_left <= 0:
            self._waited(budget.queue_wait)
            return "1 = 0", {}
        extra, params = _exclude(dialect, budget.full, self.type_limits)
        return " AND ".join(c for c in (hold, extra) if c), {**held, **params}

    def probe(self, conn: Connection, request: ClaimRequest) -> str:
        """`flow.HOLDS_STORED_SQL`: 1 while a pause or block row is stored, else 0."""
        return HOLDS_STORED_SQL

    def probed(self, value: Any) -> None:
        """Keep the probe's value: whether the next SELECTs need the hold condition."""
        self._local.probe = value
        if value is not None:
            self._stored = bool(value)

    def accept(self, conn: Connection, request: ClaimRequest, rows: list[dict]) -> list[dict]:
        """Take rows in claim order while their bucket (and the queue) has room; log the
        starts of rate-limited ones. None of them when the SELECT left the hold condition
        out and its probe found a pause or block stored: the next round selects with it."""
        if self._local.lean and self._local.probe:
            self._local.recheck = True
            return []
        budget: _Budget | None = getattr(self._local, "budget", None)
        if budget is _UNCOUNTED:
            if not any(row["type"] in self.type_limits for row in rows):
                self._local.budget = None
                return rows
            budget = self._local.budget = self._count(conn, name(conn), request, None)
        if budget is None:
            return rows
        taken = []
        for row in rows:
            if budget.queue_left is not None and budget.queue_left <= 0:
                break
            bucket = (row["type"], self._key(row))
            room = budget.left.get(bucket, self._room(row["type"]))
            if room is not None and room <= 0:
                self._waited(budget.wait.get(bucket))
                continue
            if room is not None:
                budget.left[bucket] = room - 1
                limits = self.type_limits.get(row["type"])
                if limits is not None and limits.rate:  # its next start: one spacing on
                    budget.wait[bucket] = spacing(limits.rate).total_seconds()
            if budget.queue_left is not None:
                budget.queue_left -= 1
            taken.append(row)
        self._log_starts(conn, request, taken)
        if len(taken) < len(rows):
            self._local.limited = True
        return taken

    def holding(self, conn: Connection, queue: str, now: datetime) -> bool:
        """True after a claim of this thread met a limit, or while a pause or a block is
        live: rows may come free without a doorbell (a running row ends, the window
        moves on, the block ends), so the worker tries again within a second. Reads the
        flow tables only when the claim's probe did not find them empty."""
        limited = getattr(self._local, "limited", False)
        self._local.limited = False
        if limited or not self.wait_for_holds:
            return limited
        if getattr(self._local, "probe", None) == 0:  # nothing stored, as of the SELECT
            return False
        live, ends_in = holds_end_in(conn, None if self.db_clock else now)
        self._waited(ends_in)
        return live

    def retry_seconds(self) -> float | None:
        """After `holding`: seconds until the soonest start a rate refused is admitted, or
        the soonest pause or block with an end ends (the worker claims again then); None
        when neither is known (a full concurrency limit: rows come free at no known time)."""
        wait, self._local.wait = getattr(self._local, "wait", None), None
        return wait

    def _waited(self, seconds: float | None) -> None:
        """Keep the soonest admitted start of the rates that refused rows."""
        if seconds is not None:
            known = getattr(self._local, "wait", None)
            self._local.wait = seconds if known is None else min(known, seconds)

    def _key(self, row: dict) -> str | None:
        """The row's bucket key: its limit key for a keyed type, else None."""
        limits = self.type_limits.get(row["type"])
        return row.get("limit_key") if limits is not None and limits.keyed else None

    def _room(self, job_type: str) -> int | None:
        """The room of a bucket with nothing running and no start in the window."""
        limits = self.type_limits.get(job_type)
        if limits is None:
            return None
        return min(x for x in (limits.concurrency, limits.rate and 1) if x)

    def _count(self, conn: Connection, dialect: str, request: ClaimRequest,
               queue: Limits | None) -> _Budget:
        """Lock the limiters, then count running rows and window starts per bucket."""
        names = sorted([f"type:{t}" for t in self.type_limits]
                       + ([f"queue:{request.queue}"] if queue else []))
        lock_limiters(conn, dialect, names, request.now)
        budget = _Budget()
        running: Counter = Counter()
        for (job_type, key), n in running_counts(conn, dialect, list(self.type_limits)).items():
            running[(job_type, key if self.type_limits[job_type].keyed else None)] += n
        for job_type, limits in self.type_limits.items():
            rates = {}
            if limits.rate:
                limiter = f"type:{job_type}"
                prune_starts(conn, limiter, limits.rate, request.now, db_clock=self.db_clock)
                rates = rate_states(conn, limiter, limits.rate, request.now,
                                    db_clock=self.db_clock)
            for key in set(k for t, k in running if t == job_type) | set(rates):
                rate = rates.get(key)
                left = _left(limits, running.get((job_type, key), 0), rate)
                budget.left[(job_type, key)] = left
                if left <= 0:
                    budget.full.add((job_type, key))
                    if rate is not None and not rate.admits:
                        budget.wait[(job_type, key)] = rate.next_in_seconds
        if queue is not None:
            budget.queue_left, budget.queue_wait = queue_room(
                conn, dialect, request, queue, db_clock=self.db_clock)
        return budget

    def _log_starts(self, conn: Connection, request: ClaimRequest, taken: list[dict]) -> None:
        entries = [(f"type:{row['type']}", self._key(row) or NO_KEY) for row in taken
                   if (lm := self.type_limits.get(row["type"])) is not None and lm.rate]
        queue = self.queue_limits.get(request.queue) if request.queue else None
        if queue is not None and queue.rate:
            entries += [(f"queue:{request.queue}", NO_KEY)] * len(taken)
        if entries:
            stmt = fs.insert().values(started_at=db_now(conn)) if self.db_clock else fs.insert()
            at = {} if self.db_clock else {"started_at": request.now}
            conn.execute(stmt, [{"limiter": limiter, "limit_key": key, **at}
                                for limiter, key in entries])


def _left(limits: Limits, running: int, rate: RateState | None) -> int:
    room = [limits.concurrency - running] if limits.concurrency else []
    if limits.rate:
        room.append(1 if rate is None else rate.admits)
    return min(room)


def _exclude(dialect: str, full: set[tuple[str, str | None]],
             type_limits: Mapping[str, Limits]) -> tuple[str, dict[str, Any]]:
    """SQL excluding the buckets in `full` (keyed types: per key; others: the type)."""
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
            conds.append("limit_key IN (" + ", ".join(
                ph(dialect, f"p_k{n}_{i}") for i in range(len(named))) + ")")
        if None in keys:
            conds.append("limit_key IS NULL")
        parts.append(f"NOT (type = {t} AND ({' OR '.join(conds)}))")
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


def queue_room(conn: Connection, dialect: str, request: ClaimRequest, limits: Limits, *,
               db_clock: bool = False) -> tuple[int, float | None]:
    """How many more rows of `request.queue` may start now under the queue's limits, and,
    when its rate admits none, in how many seconds it admits the next (else None)."""
    room, wait = [], None
    if limits.concurrency:
        sql = (f"SELECT COUNT(*) FROM {q.name} WHERE queue = {ph(dialect, 'queue')} "
               f"AND status = 'running'")
        running = conn.exec_driver_sql(sql, {"queue": request.queue}).scalar_one()
        room.append(limits.concurrency - running)
    if limits.rate:
        limiter = f"queue:{request.queue}"
        prune_starts(conn, limiter, limits.rate, request.now, db_clock=db_clock)
        state = rate_states(conn, limiter, limits.rate, request.now,
                            db_clock=db_clock).get(None)
        room.append(1 if state is None else state.admits)
        if state is not None and not state.admits:
            wait = state.next_in_seconds
    return min(room), wait
