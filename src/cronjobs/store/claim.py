"""The claim: where a `pending` row becomes `running` for one worker, and its lease.

Every path that runs rows claims through `claim_jobs` — the worker's loop (a batch for its
idle slots), `InlineRunner.run_next` (`cronjobs.testing.drain`), `cronjobs run ID` and
`queue.process` (by id) — so they all run the same SQL. It is driver SQL (sent with
`exec_driver_sql`): it runs thousands of times a second, where building and compiling a
Core statement cost more CPU than the database spends on it (docs/performance.md).

A claim is one locking SELECT of candidates (`ORDER BY priority, id ... FOR UPDATE SKIP
LOCKED` on MariaDB and PostgreSQL; SQLite has one writer at a time) and one conditional
UPDATE (`status = 'pending'` -> `running`) per group of rows that share their terms
(lease, attempts), so two workers never take the same row. The claiming worker decides
the terms (`HandlerTerms`): the lease is its handler's MAX_RUNTIME plus grace, on the
database's clock; a row dispatched without `max_attempts` gets its handler's
MAX_ATTEMPTS here (a worker that does not know the type leaves it unset).

Flow control (pauses, blocks, limits: `ClaimPolicy.flow`, a `limiter.FlowControl`)
decides what may be claimed inside the claim's transaction: the hold condition written
once in `flow` is AND-ed to the candidate SELECT (or its probe tells it is not needed),
the limits' `Budget` (`limiter`) admits candidates in claim order and excludes full
buckets from the next round's SELECT. The claim takes its state in (`ClaimRequest`) and
gives its whole answer back (`Claim`: rows, whether rows wait behind flow control and
for how long, what the next claim should know), as Oban's `fetch_jobs(conf, meta,
running)` does; nothing is kept between claims, nothing is asked after one.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import Connection

from ..errors import StoreError
from .flow import HOLDS_STORED_SQL, claim_hold_sql, hold_params, holds_end_in
from .limiter import Budget, FlowControl, count_budget, exclude_sql, log_starts
from .models import cronjob_queue as q
from .sql import (
    bind,
    decode_times,
    due_sql,
    lease_sql,
    lease_value,
    lock_sql,
    name,
    not_expired_sql,
    ph,
    unindexed,
)

TABLE = q.name
# What a claim reads: every column but the stored result and traceback (a job never
# needs them to run).
CLAIM_COLUMNS = tuple(c.name for c in q.columns
                      if c.name not in ("result_payload", "traceback"))
# What the claim's UPDATE sets: not read by the candidate SELECT (`_take` fills them in),
# which spares the driver decoding four times and two texts per row.
SET_BY_CLAIM = ("status", "started_at", "finished_at", "worker_id", "updated_at", "locked_until")
READ_COLUMNS = tuple(c for c in CLAIM_COLUMNS if c not in SET_BY_CLAIM)
TIME_COLUMNS = tuple(c.name for c in q.columns if c.type.python_type is datetime
                     and c.name in READ_COLUMNS)
PROBE = "claim_probe"  # the column of flow control's probe in the candidate SELECT


@dataclass(frozen=True)
class ClaimRequest:
    """What to claim: the best due rows of `queue` (at most `limit`), or row `job_id`
    (pending, due or not: an operator's "run it now").

    Attributes:
        now: the claiming instant (naive UTC, the injected clock's): due rows are those
            scheduled at or before it; written as `started_at` and `updated_at`.
        worker_id: written to the claimed rows (`host:pid`).
        queue: the queue to claim from; or
        job_id: the one row to claim (not once its `expires_at` has passed).
        limit: at most this many rows (the caller's idle slots); 1 for `job_id`.
        holds_stored: the claimer's last claim found a pause or block stored
            (`Claim.holds_stored`): select with the hold condition from the start.

    Raises:
        ValueError: neither or both of `queue` and `job_id`, or `limit` below 1.
    """

    now: datetime
    worker_id: str
    queue: str | None = None
    job_id: int | None = None
    limit: int = 1
    holds_stored: bool = False

    def __post_init__(self) -> None:
        if (self.queue is None) == (self.job_id is None):
            raise ValueError(f"a claim names a queue or a job id, got queue={self.queue!r} "
                             f"and job_id={self.job_id!r}")
        if self.limit < 1 or (self.job_id is not None and self.limit != 1):
            raise ValueError(f"limit must be >= 1 (1 for a job id), got {self.limit!r}")


class TypeTerms(Protocol):
    """A job type's terms in the claiming worker."""

    lease_seconds: float  # the lease of a claimed row: its MAX_RUNTIME plus grace, seconds
    max_attempts: int | None  # MAX_ATTEMPTS for a row dispatched without; None: no handler


class HandlerTerms(Protocol):
    """The claiming worker's view of the handlers (its `Executor`)."""

    def terms(self, job_type: str) -> TypeTerms:
        """The terms of a row of `job_type` (asked once per type per claim)."""


@dataclass(frozen=True)
class ClaimPolicy:
    """How a claimer claims: its handlers' terms and the flow control it enforces (the
    `conf` of the claim; what changes from claim to claim travels in `ClaimRequest` and
    `Claim`).

    Attributes:
        terms: the lease and attempts per type (`HandlerTerms`).
        flow: pauses, blocks and limits (`limiter.FlowControl`); None: every due row may
            be claimed (no probe, no hold condition: the claim as it was before flow
            control, for measurements).
    """

    terms: HandlerTerms
    flow: FlowControl | None = None


@dataclass(frozen=True)
class Claim:
    """A claim's whole answer.

    Attributes:
        rows: the claimed rows as dicts of `CLAIM_COLUMNS` (no `result_payload`) after
            the update (`locked_until` as this host computes it), in claim order; empty
            when nothing is due (or row `job_id` is not pending).
        held: a claim of a queue came back short while rows may wait behind flow control
            and come free without a new doorbell (a limit met; with
            `FlowControl.wait_for_holds`, a live pause or block): the worker claims the
            queue again within a second. False for a claim by id.
        retry_seconds: when `held`, seconds until held rows come free, when known (a
            rate's next start, the end of the soonest pause or block); else None.
        holds_stored: the claim's last probe found a pause or block stored: pass it in
            the claimer's next `ClaimRequest`, whose SELECT then carries the hold
            condition from the start.
        terms: `{job type: its TypeTerms}` of the claimed rows, as `policy.terms` gave
            them (asked once per type): the worker prepares its rows with them.
    """

    rows: list[dict]
    held: bool = False
    retry_seconds: float | None = None
    holds_stored: bool = False
    terms: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class _Claiming:
    """One flow-controlled claim in progress (`claim_jobs`' own, never kept)."""

    stored: bool  # a pause or block is stored, as far as the claim knows
    lean: bool = True  # this round's SELECT left the hold condition out
    probe: Any = None  # this round's probe (None: its SELECT returned no row)
    budget: Budget | None = None  # None: not counted (no limited row met yet)
    limited: bool = False  # a limit refused a row
    wait: float | None = None  # seconds until the soonest refused row may start

    def waited(self, seconds: float | None) -> None:
        """Keep the soonest time a held row comes free."""
        if seconds is not None:
            self.wait = seconds if self.wait is None else min(self.wait, seconds)


def claim_jobs(conn: Connection, request: ClaimRequest, policy: ClaimPolicy) -> Claim:
    """Claim rows for `request.worker_id`: status `running`, attempts + 1, a lease of
    `policy.terms.terms(type).lease_seconds` on the database's clock, an unset
    `max_attempts` resolved to its `max_attempts`. Best first: lowest priority, then
    oldest id; rows held by `policy.flow` (a pause, a block, a full limit) are skipped,
    so the rows behind them are reached (module docstring of `limiter`).

    Args:
        conn: a connection inside the caller's transaction (commit makes the claim).
        request: what to claim (`ClaimRequest`).
        policy: the claimer's terms and flow control (`ClaimPolicy`).

    Returns:
        The `Claim`: its rows, whether rows wait behind flow control, and what the next
        claim should know.

    Raises:
        StoreError: an UPDATE took fewer rows than were locked (never expected).
    """
    dialect = name(conn)
    flow = policy.flow
    terms: dict[str, Any] = {}
    if flow is None:
        rows, _ = _candidates(conn, dialect, request, request.limit, "", {})
        return Claim(_take(conn, dialect, request, policy.terms, terms, rows), terms=terms)
    state = _Claiming(stored=request.holds_stored)
    taken: list[dict] = []
    for round_ in range(flow.rounds):
        where = _where(conn, dialect, request, flow, state, first=round_ == 0)
        if where is None:  # the queue's own limit is full
            break
        rows, state.probe = _candidates(conn, dialect, request, request.limit - len(taken),
                                        *where, HOLDS_STORED_SQL)
        if state.probe is not None:
            state.stored = bool(state.probe)
        chosen = _accept(conn, dialect, request, flow, state, rows) if rows else rows
        taken += _take(conn, dialect, request, policy.terms, terms, chosen)
        if len(chosen) == len(rows) or len(taken) >= request.limit:
            break
    if request.job_id is not None or len(taken) >= request.limit:
        return Claim(taken, holds_stored=state.stored, terms=terms)
    return Claim(taken, _held(conn, request, flow, state), state.wait, state.stored, terms)


def _where(conn: Connection, dialect: str, request: ClaimRequest, flow: FlowControl,
           state: _Claiming, first: bool) -> tuple[str, dict[str, Any]] | None:
    """This round's condition: the hold condition (`flow.claim_hold_sql`) unless no pause
    or block is known to be stored, and the exclusion of the buckets at their limit. A
    queue's limits are locked and counted before the first SELECT, a handler's once a
    round met a row of a limited type (`_accept`). None: the queue's limit is full."""
    state.lean = not state.stored
    hold, held = (("", {}) if state.lean else
                  (claim_hold_sql(dialect, flow.db_clock),
                   hold_params(dialect, request.now, flow.db_clock)))
    queue = flow.queue_limits.get(request.queue) if request.queue else None
    if (not flow.type_limits and queue is None) or (first and queue is None):
        state.budget = None  # counted in `_accept`, if a limited row comes
        return hold, held
    state.budget = budget = count_budget(conn, dialect, flow, request.now,
                                         queue=request.queue if queue else None)
    full = budget.full()
    if full or (budget.queue is not None and budget.queue.full()):
        state.limited = True
    if budget.queue is not None and budget.queue.full():
        state.waited(budget.wait(None))
        return None
    extra, params = exclude_sql(dialect, full, flow.type_limits)
    return " AND ".join(c for c in (hold, extra) if c), {**held, **params}


def _accept(conn: Connection, dialect: str, request: ClaimRequest, flow: FlowControl,
            state: _Claiming, rows: list[dict]) -> list[dict]:
    """The candidates to take, in claim order, while their bucket and the queue have room
    (`Budget.admit`); the starts of rate-limited ones logged. None of them when the
    SELECT left the hold condition out and its probe found a pause or block stored: the
    next round selects with it."""
    if state.lean and state.probe:
        return []
    budget = state.budget
    if budget is None:
        if not any(row["type"] in flow.type_limits for row in rows):
            return rows
        budget = state.budget = count_budget(conn, dialect, flow, request.now)
    taken = []
    for row in rows:
        refused = budget.admit(row)
        if refused is None:
            taken.append(row)
        else:
            state.limited = True
            state.waited(budget.wait(None if refused[1].startswith("queue:")
                                     else (row["type"], flow.key(row))))
    log_starts(conn, flow, request.queue, request.now, taken)
    return taken


def _held(conn: Connection, request: ClaimRequest, flow: FlowControl,
          state: _Claiming) -> bool:
    """Whether rows of a short claim's queue may wait behind flow control and come free
    without a doorbell: a limit refused a row, or (`wait_for_holds`) a pause or block is
    live — read only when the claim's last probe did not find the flow tables empty."""
    if state.limited or not flow.wait_for_holds:
        return state.limited
    if state.probe == 0:  # nothing stored, as of the last SELECT
        return False
    live, ends_in = holds_end_in(conn, None if flow.db_clock else request.now)
    state.waited(ends_in)
    return live


def select_sql(dialect: str, by_id: bool, extra: str = "", probe: str = "") -> str:
    """The candidate SELECT (driver SQL of `dialect`), by queue or by id, with flow control's
    `extra` condition AND-ed and its `probe` returned as the last column (`PROBE`)."""
    return _select_sql(dialect, by_id, extra, probe)


def update_sql(dialect: str, ids: Iterable[int]) -> str:
    """The UPDATE that takes the locked rows `ids` (driver SQL of `dialect`). On
    PostgreSQL the ids are its parameter `ids` (a list; `update_params`), so the text is
    the same for every claim; elsewhere they are written into it."""
    if dialect == "postgresql":
        return _update_sql(dialect)
    return _update_sql(dialect).format(ids=", ".join(str(int(i)) for i in ids))


def update_params(dialect: str, ids: list[int], **params: Any) -> dict[str, Any]:
    """The parameters of `update_sql(dialect, ids)`: `params` and, on PostgreSQL, `ids`."""
    return {**params, "ids": [int(i) for i in ids]} if dialect == "postgresql" else params


@functools.lru_cache(maxsize=64)
def _select_sql(dialect: str, by_id: bool, extra: str, probe: str = "") -> str:
    p = functools.partial(ph, dialect)
    more = f" AND ({extra})" if extra else ""
    columns = ", ".join((*READ_COLUMNS, f"{probe} AS {PROBE}") if probe else READ_COLUMNS)
    head = f"SELECT {columns} FROM {TABLE} WHERE "
    if by_id:  # waits for a worker's claim of the row (then sees it running)
        return (f"{head}id = {p('job_id')} AND status = 'pending' "
                f"AND {not_expired_sql(dialect)}{more}"
                f"{lock_sql(dialect, skip=False)}")
    return (f"{head}queue = {p('queue')} AND {due_sql(dialect)}{more} "
            f"ORDER BY priority, id LIMIT {p('limit')}{lock_sql(dialect, skip=True)}")


@functools.lru_cache(maxsize=8)
def _update_sql(dialect: str) -> str:
    p = functools.partial(ph, dialect)
    head = (f"UPDATE {TABLE} SET status = 'running', attempts = attempts + 1, "
            f"started_at = {p('now')}, finished_at = NULL, worker_id = {p('worker_id')}, "
            f"updated_at = {p('now')}, locked_until = {lease_sql(dialect, p('lease'))}, "
            f"max_attempts = COALESCE(max_attempts, {p('max_attempts')}) ")
    if dialect == "postgresql":
        # The rows are found by id alone: PostgreSQL's planner, on statistics older than
        # a burst of new rows (autovacuum analyzes a minute or more later), estimates
        # `status = 'pending'` at a few rows and scans every pending row through a status
        # index instead, bitmap and all, an order of magnitude slower at 40,000 pending
        # rows. The status check stays (an expression no index serves).
        return head + f"WHERE id = ANY({p('ids')}::bigint[]) AND {unindexed('status')} = 'pending'"
    return head + "WHERE id IN ({ids}) AND status = 'pending'"


def _candidates(conn: Connection, dialect: str, request: ClaimRequest, limit: int,
                extra: str, params: dict[str, Any], probe: str = ""
                ) -> tuple[list[dict], Any]:
    """Lock and read the candidates of `request` (at most `limit`), best first, and the
    value of `probe` (its last column; None without a probe or a row)."""
    if request.job_id is not None:
        params = {**params, "job_id": int(request.job_id), "now": bind(dialect, request.now)}
    else:
        params = {**params, "queue": request.queue, "now": bind(dialect, request.now),
                  "limit": int(limit)}
    sql = _select_sql(dialect, request.job_id is not None, extra, probe)
    got = conn.exec_driver_sql(sql, params).all()
    value = got[0][-1] if probe and got else None
    found = [dict(zip(READ_COLUMNS, row[:-1] if probe else row, strict=True)) for row in got]
    return decode_times(dialect, found, TIME_COLUMNS), value


def _take(conn: Connection, dialect: str, request: ClaimRequest, handlers: HandlerTerms,
          terms: dict[str, Any], rows: list[dict]) -> list[dict]:
    """Mark the locked `rows` running with one UPDATE per (lease, max attempts) group;
    the terms of their types are asked of `handlers` once and kept in `terms`."""
    if not rows:
        return rows
    for job_type in {row["type"] for row in rows} - terms.keys():
        terms[job_type] = handlers.terms(job_type)
    plan = [(row, terms[row["type"]].lease_seconds, terms[row["type"]].max_attempts)
            for row in rows]
    groups: dict[tuple[float, int | None], list[int]] = {}
    for row, lease, attempts in plan:
        groups.setdefault((lease, attempts), []).append(row["id"])
    now = bind(dialect, request.now)
    taken = sum(conn.exec_driver_sql(update_sql(dialect, ids), update_params(
        dialect, ids, now=now, worker_id=request.worker_id,
        lease=lease_value(dialect, lease), max_attempts=attempts)).rowcount
        for (lease, attempts), ids in groups.items())
    if taken != len(rows):  # cannot happen under the row locks; never hand out a row twice
        raise StoreError(f"claimed {taken} of {len(rows)} locked rows "
                         f"({request.queue or f'job {request.job_id}'})")
    for row, lease, attempts in plan:
        row.update(status="running", attempts=row["attempts"] + 1, started_at=request.now,
                   finished_at=None, worker_id=request.worker_id, updated_at=request.now,
                   locked_until=request.now + timedelta(seconds=lease))  # as seen by this host
        if row["max_attempts"] is None:
            row["max_attempts"] = attempts
    return rows
