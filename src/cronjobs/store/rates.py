"""The rate rule, written once: the start log of the rate limits (`cronjob_flow_start`)
and what a rate admits now.

A rate of N per window admits one start of a key at a time, `spacing(rate)` (window/N)
after the key's last start, and never more than N in the rolling window. The claim
(`claim.claim_jobs`, `limiter.count_budget`) logs its starts and asks `rate_states`; the
held-rows counts (`held`, through the same `count_budget`, reading only) and the Job page's
"waits for the rate limit" (`rate_now`) read the same `rate_states` (nothing written or
locked), so they say what the claim would do.

**Which clock**: with `db_clock` the window is judged with the database's clock (the
workers do so when their clock is the system clock, `flow.uses_db_clock`), as leases are;
else with the `now` given (an injected clock in tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from ..flow.rules import Rate
from .models import cronjob_flow_start as fs
from .sql import bind, decode_times, lease_sql, lease_value, name, now_sql, ph

NO_KEY = ""  # the start log's key of a keyless row or of a limit without keys


@dataclass(frozen=True)
class RateState:
    """A rate's starts of one key (or of a whole limit) now.

    Attributes:
        starts: starts in the rolling window.
        admits: starts the rate admits now: 1 or 0 (starts are spaced, see the module
            docstring).
        next_in_seconds: seconds until the next start is admitted (0.0: now).
    """

    starts: int
    admits: int
    next_in_seconds: float


@dataclass(frozen=True)
class RateNow:
    """A rate limit at one instant (`rate_now`).

    Attributes:
        fresh: the starts it admits now for a key with no start in its window.
        admitted: `{key (None: no key): starts it admits now}` of the keys with starts in
            the window.
        next_in: `{key: seconds until it admits a start}` of the keys that admit none
            now.
    """

    fresh: int
    admitted: Mapping[str | None, int]
    next_in: Mapping[str | None, float]

    def admits(self, key: str | None) -> int:
        """How many more starts of bucket `key` the rate admits now (0: none)."""
        return self.admitted.get(key, self.fresh)

    def next_start_in(self, key: str | None) -> float:
        """Seconds until the rate admits a start of `key`: 0.0 when it admits one now."""
        return 0.0 if self.admits(key) else self.next_in.get(key, 0.0)


def rate_now(conn: Connection, limiter: str, rate: Rate, now: datetime, *,
             db_clock: bool = False) -> RateNow:
    """What `rate` of `limiter` (`"type:<type>"` or `"queue:<queue>"`, as the claim logs
    its starts) admits at `now`, from `rate_states` (a read: nothing deleted).

    Args:
        rate: the limit of `limiter`.
        now: naive UTC; ignored with `db_clock`.
        db_clock: judge with the database's clock, as the workers do when their clock is
            the system clock (`flow.uses_db_clock`).

    Returns:
        A `RateNow`.
    """
    states = rate_states(conn, limiter, rate, now, db_clock=db_clock)
    return RateNow(fresh=1, admitted={k: s.admits for k, s in states.items()},
                   next_in={k: s.next_in_seconds for k, s in states.items() if not s.admits})


def spacing(rate: Rate) -> timedelta:
    """The least time between two starts of one key under `rate`: its window over its
    count, in whole microseconds (`"10/s"`: 0.1 s)."""
    return timedelta(microseconds=round(rate.window_seconds * 1_000_000 / rate.count))


def prune_starts(conn: Connection, limiter: str, rate: Rate, now: datetime, *,
                 db_clock: bool) -> int:
    """Delete the start-log entries of `limiter` that left `rate`'s window (at `now`, naive
    UTC; with `db_clock` at the database's clock now). Returns how many."""
    dialect = name(conn)
    since, params = _since(dialect, rate, now, db_clock)
    return conn.exec_driver_sql(f"DELETE FROM {fs.name} WHERE limiter = {ph(dialect, 'lim')} "
                                f"AND started_at <= {since}", {**params, "lim": limiter}
                                ).rowcount


def rate_states(conn: Connection, limiter: str, rate: Rate, now: datetime, *,
                db_clock: bool) -> dict[str | None, RateState]:
    """What `rate` admits now, per key of `limiter` (`"type:<job type>"` or
    `"queue:<queue>"`): a read, nothing written or locked (a view may call it).

    A key admits one start when it had none in the last `spacing(rate)` and fewer than
    `rate.count` in the rolling window; else `next_in_seconds` tells when it will.

    Args:
        limiter: the limit's name; rate: its rate (`flowrules.Rate`).
        now: naive UTC, the window's end; ignored with `db_clock`, which judges with the
            database's clock now (the workers do so when their clock is the system clock:
            `flow.uses_db_clock`).

    Returns:
        `{limit key or None (a keyless row, a queue's limit): RateState}` for the keys
        with a start in the window; a key not in it admits one start now.
    """
    dialect = name(conn)
    since, params = _since(dialect, rate, now, db_clock)
    at = f", {now_sql(dialect)}" if db_clock else ""
    found = [dict(zip(("key", "starts", "first", "last", "now"), row, strict=False))
             for row in conn.exec_driver_sql(
                 f"SELECT limit_key, COUNT(*), MIN(started_at), MAX(started_at){at} FROM "
                 f"{fs.name} WHERE limiter = {ph(dialect, 'lim')} AND started_at > {since} "
                 f"GROUP BY limit_key", {**params, "lim": limiter})]
    decode_times(dialect, found, ("first", "last", "now"))
    step, window = spacing(rate), timedelta(seconds=rate.window_seconds)
    states = {}
    for row in found:
        at_now = row.get("now") or now
        wait = row["last"] + step - at_now
        if row["starts"] >= rate.count:
            wait = max(wait, row["first"] + window - at_now)
        seconds = max(0.0, wait.total_seconds())
        states[row["key"] if row["key"] != NO_KEY else None] = RateState(
            row["starts"], 0 if seconds > 0 else 1, seconds)
    return states


def _since(dialect: str, rate: Rate, now: datetime, db_clock: bool
           ) -> tuple[str, dict[str, Any]]:
    """The SQL of the window's start (`started_at` must be after it) and its parameters."""
    if db_clock:
        return (lease_sql(dialect, ph(dialect, "ago")),
                {"ago": lease_value(dialect, -rate.window_seconds)})
    return ph(dialect, "since"), {"since": bind(dialect, now - timedelta(
        seconds=rate.window_seconds))}
