"""The claim: where a `pending` row becomes `running` for one worker, and its lease.

Every path that runs rows claims through `claim_jobs` — the worker's loop (a batch for its
idle slots), `Executor.run_next` (`cronjobs.testing.drain`), `cronjobs run ID` and
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

`ClaimPolicy` is the one place where flow control (limits, blocks, pauses) will decide
what may be claimed: it adds conditions to the candidate SELECT and filters candidates,
inside the claim's transaction. Without a policy the claim costs what it did before
there was one.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import Connection

from ..errors import StoreError
from ..models import cronjob_queue as q
from .sql import (
    bind,
    decode_times,
    due_sql,
    lease_sql,
    lease_value,
    lock_sql,
    name,
    ph,
    unindexed,
)

TABLE = q.name
# What a claim reads: every column but the stored result (a job never needs it to run).
CLAIM_COLUMNS = tuple(c.name for c in q.columns if c.name != "result_payload")
# What the claim's UPDATE sets: not read by the candidate SELECT (`_take` fills them in),
# which spares the driver decoding four times and two texts per row.
SET_BY_CLAIM = ("status", "started_at", "finished_at", "worker_id", "updated_at", "locked_until")
READ_COLUMNS = tuple(c for c in CLAIM_COLUMNS if c not in SET_BY_CLAIM)
TIME_COLUMNS = tuple(c.name for c in q.columns if c.type.python_type is datetime
                     and c.name in READ_COLUMNS)
PROBE = "claim_probe"  # the column of a policy's probe in the candidate SELECT


@dataclass(frozen=True)
class ClaimRequest:
    """What to claim: the best due rows of `queue` (at most `limit`), or row `job_id`
    (pending, due or not: an operator's "run it now").

    Attributes:
        now: the claiming instant (naive UTC, the injected clock's): due rows are those
            scheduled at or before it; written as `started_at` and `updated_at`.
        worker_id: written to the claimed rows (`host:pid`).
        queue: the queue to claim from; or
        job_id: the one row to claim.
        limit: at most this many rows (the caller's idle slots); 1 for `job_id`.

    Raises:
        ValueError: neither or both of `queue` and `job_id`, or `limit` below 1.
    """

    now: datetime
    worker_id: str
    queue: str | None = None
    job_id: int | None = None
    limit: int = 1

    def __post_init__(self) -> None:
        if (self.queue is None) == (self.job_id is None):
            raise ValueError(f"a claim names a queue or a job id, got queue={self.queue!r} "
                             f"and job_id={self.job_id!r}")
        if self.limit < 1 or (self.job_id is not None and self.limit != 1):
            raise ValueError(f"limit must be >= 1 (1 for a job id), got {self.limit!r}")


class HandlerTerms(Protocol):
    """The claiming worker's view of the handlers (its `Executor`)."""

    def lease_seconds(self, job_type: str) -> float:
        """The lease of a row of `job_type`: its MAX_RUNTIME plus grace, seconds."""

    def max_attempts(self, job_type: str) -> int | None:
        """The attempts of a row of `job_type` dispatched without `max_attempts`: its
        handler's MAX_ATTEMPTS; None when this worker has no handler for the type."""


class ClaimPolicy:
    """The claim's policy hook: what may be claimed, decided inside the claim transaction.
    This base class allows everything and is what "no policy" means; flow control
    (concurrency and rate limits, blocked keys, paused queues) subclasses it.

    The claim calls, in its transaction, for each round (at most `rounds`):

    1. `where(conn, request)` -> `(sql, params)`: a condition AND-ed to the candidate
       SELECT (`WHERE queue = ... AND <due> AND (<sql>) ORDER BY priority, id LIMIT n
       FOR UPDATE SKIP LOCKED`; by id: `WHERE id = ... AND status = 'pending' AND
       (<sql>) FOR UPDATE`, and the policy decides whether an operator's "run it now"
       passes its limits: `request.job_id` tells), as driver SQL on `cronjob_queue`
       with placeholders from `store.sql.ph(dialect, key)` and `params` bound by those
       keys (prefix them `p_`: the claim's own are `queue`, `job_id`, `now`, `limit`).
       Exclude here what cannot be taken (a paused queue, a blocked key, a type at its
       concurrency limit), so rows behind them are reached: excluding in the SELECT, not
       after it, is what keeps a backlog of held rows from blocking the queue. The
       policy may read or lock its own rows here (a limiter row FOR UPDATE serialises
       claimers of one limit). `""`: no condition (the SELECT text is cached per
       distinct `sql`).
    2. `probe(conn, request)` -> `sql`: a scalar expression the candidate SELECT also
       returns (uncorrelated: one value for the statement), handed to `probed(value)`
       right after the SELECT (None when it returned no row): what the policy learns in
       the statement itself, with no round trip of its own — the flow policy learns
       whether any pause or block is stored, and so whether the condition it left out
       was needed. `""` (the default): no probe, `probed` is not called.
    3. `accept(conn, request, rows)` -> the candidates to take, a sub-list of `rows`
       (locked, in claim order), e.g. at most N more of a limited type. Those dropped
       stay `pending` with their attempts; their locks end with the transaction.

    When `accept` dropped candidates and slots are left, the claim selects again (round
    2, ...) after taking what was accepted, so `where` can exclude what it learned. The
    base class: no condition, no probe, every candidate accepted, one round — exactly the
    claim without a policy (one SELECT and one UPDATE per terms group).

    4. `holding(conn, queue, now)`, asked by a worker whose claim of `queue` came back
       short, in the same transaction: True when rows may be waiting behind the policy
       (a limit, a block, a pause) and will be free without a new doorbell, so the
       worker claims again within a second instead of waiting for one — or sooner:
       `retry_seconds()`, asked next, tells when the policy knows (a rate's next start).
    """

    rounds: int = 1

    def where(self, conn: Connection, request: ClaimRequest) -> tuple[str, dict[str, Any]]:
        """Extra candidate condition (driver SQL) and its parameters; `""` for none."""
        return "", {}

    def probe(self, conn: Connection, request: ClaimRequest) -> str:
        """A scalar SQL expression the candidate SELECT also returns; `""` for none."""
        return ""

    def probed(self, value: Any) -> None:
        """The probe's value, read with the candidates (None: the SELECT returned no row)."""

    def accept(self, conn: Connection, request: ClaimRequest, rows: list[dict]) -> list[dict]:
        """The candidates to take (a sub-list of `rows`, in their order)."""
        return rows

    def holding(self, conn: Connection, queue: str, now: datetime) -> bool:
        """Whether rows of `queue` may wait behind this policy (claim again soon)."""
        return False

    def retry_seconds(self) -> float | None:
        """After `holding` said True: seconds until held rows come free, when known."""
        return None


def claim_jobs(conn: Connection, request: ClaimRequest, terms: HandlerTerms,
               policy: ClaimPolicy | None = None) -> list[dict]:
    """Claim rows for `request.worker_id`: status `running`, attempts + 1, a lease of
    `terms.lease_seconds(type)` on the database's clock, an unset `max_attempts` resolved
    to `terms.max_attempts(type)`. Best first: lowest priority, then oldest id.

    Args:
        conn: a connection inside the caller's transaction (commit makes the claim).
        request: what to claim (`ClaimRequest`).
        terms: the claiming worker's view of the handlers (`HandlerTerms`).
        policy: what may be claimed (`ClaimPolicy`); None claims every due row.

    Returns:
        The claimed rows as dicts of `CLAIM_COLUMNS` (no `result_payload`) after the
        update (`locked_until` as this host computes it), in claim order; empty when
        nothing is due (or row `job_id` is not pending).

    Raises:
        StoreError: an UPDATE took fewer rows than were locked (never expected).
        ValueError: the policy accepted a row that was not a candidate.
    """
    dialect = name(conn)
    if policy is None:
        rows, _ = _candidates(conn, dialect, request, request.limit, "", {})
        return _take(conn, dialect, request, terms, rows)
    taken: list[dict] = []
    for _ in range(max(1, policy.rounds)):
        extra, params = policy.where(conn, request)
        probe = policy.probe(conn, request)
        rows, probed = _candidates(conn, dialect, request, request.limit - len(taken), extra,
                                   params, probe)
        if probe:
            policy.probed(probed)
        chosen = policy.accept(conn, request, rows) if rows else rows
        known = {id(r) for r in rows}
        if any(id(r) not in known for r in chosen):
            raise ValueError("ClaimPolicy.accept returned a row that was not a candidate")
        taken += _take(conn, dialect, request, terms, chosen)
        if len(chosen) == len(rows) or len(taken) >= request.limit:
            break
    return taken


def renew_leases(conn: Connection, leases: Iterable[tuple[int, int, float]]) -> int:
    """Extend the leases of running rows: `(id, attempt, lease_seconds)` triples; each
    lease then ends `lease_seconds` after the database's clock now. One UPDATE per lease
    length, fenced by status and attempt (a run whose row was taken back renews nothing).

    Returns:
        How many rows were still held by those runs and got the new lease.
    """
    dialect = name(conn)
    groups: dict[float, list[tuple[int, int]]] = {}
    for job_id, attempt, lease in leases:
        groups.setdefault(float(lease), []).append((int(job_id), int(attempt)))
    renewed = 0
    for lease, runs in groups.items():
        renewed += conn.exec_driver_sql(_renew_sql(dialect, tuple(runs)), {
            "lease": lease_value(dialect, lease)}).rowcount
    return renewed


def select_sql(dialect: str, by_id: bool, extra: str = "", probe: str = "") -> str:
    """The candidate SELECT (driver SQL of `dialect`), by queue or by id, with a policy's
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
        return (f"{head}id = {p('job_id')} AND status = 'pending'{more}"
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


def _renew_sql(dialect: str, runs: tuple[tuple[int, int], ...]) -> str:
    held = " OR ".join(f"(id = {job_id} AND attempts = {attempt})" for job_id, attempt in runs)
    return (f"UPDATE {TABLE} SET locked_until = {lease_sql(dialect, ph(dialect, 'lease'))} "
            f"WHERE status = 'running' AND ({held})")


def _candidates(conn: Connection, dialect: str, request: ClaimRequest, limit: int,
                extra: str, params: dict[str, Any], probe: str = ""
                ) -> tuple[list[dict], Any]:
    """Lock and read the candidates of `request` (at most `limit`), best first, and the
    value of `probe` (its last column; None without a probe or a row)."""
    if request.job_id is not None:
        params = {**params, "job_id": int(request.job_id)}
    else:
        params = {**params, "queue": request.queue, "now": bind(dialect, request.now),
                  "limit": int(limit)}
    sql = _select_sql(dialect, request.job_id is not None, extra, probe)
    got = conn.exec_driver_sql(sql, params).all()
    value = got[0][-1] if probe and got else None
    found = [dict(zip(READ_COLUMNS, row[:-1] if probe else row, strict=True)) for row in got]
    return decode_times(dialect, found, TIME_COLUMNS), value


def _take(conn: Connection, dialect: str, request: ClaimRequest, terms: HandlerTerms,
          rows: list[dict]) -> list[dict]:
    """Mark the locked `rows` running with one UPDATE per (lease, max attempts) group."""
    if not rows:
        return rows
    types = {row["type"] for row in rows}
    by_type = {t: (terms.lease_seconds(t), terms.max_attempts(t)) for t in types}
    plan = [(row, *by_type[row["type"]]) for row in rows]
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
