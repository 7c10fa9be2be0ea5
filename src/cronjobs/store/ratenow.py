"""What a rate limit admits at an instant, read from the claim's own start log: how many
more starts of a bucket (a type's key, a queue) it admits now, and when it admits the
next one. The held-rows counts (`held`) and the Job page's "waits for the rate limit"
ask here, so they say what the claim (`limiter.FlowPolicy`) would do.

This is the one place outside the claim that applies the rate rule, and it applies it
through the claim's own `limiter.start_counts`: when the rule changes there, `rate_now`
follows (the time of the next start, below, is the only part read here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, select

from ..flowrules import Rate
from ..models import cronjob_flow_start as fs
from .limiter import NO_KEY, start_counts
from .sql import name

EVERY_KEY = object()  # `rate_now(key=...)`: count every key, no time of a next start


@dataclass(frozen=True)
class RateNow:
    """A rate limit at `now` (`rate_now`).

    Attributes:
        rate: the limit.
        now: naive UTC, the instant asked about.
        starts: `{key (None: no key): starts in the window ending at now}`; a key that
            is not here has none.
        next_at: `{key: naive UTC}` when the asked key's next start is admitted, for a
            key the rate admits nothing now.
    """

    rate: Rate
    now: datetime
    starts: Mapping[str | None, int]
    next_at: Mapping[str | None, datetime]

    def admits(self, key: str | None) -> int:
        """How many more starts of bucket `key` the rate admits at `now` (0: full)."""
        return max(0, self.rate.count - self.starts.get(key, 0))

    def next_start_in(self, key: str | None) -> float:
        """Seconds from `now` until the rate admits a start of `key` (0 when it admits
        one now; asked key only, see `rate_now`)."""
        at = self.next_at.get(key)
        return 0.0 if at is None or self.admits(key) else max(0.0, (at - self.now)
                                                                   .total_seconds())


def rate_now(conn: Connection, limiter: str, rate: Rate, now: datetime, *,
             key: object = EVERY_KEY) -> RateNow:
    """The starts of `limiter` (`"type:<type>"` or `"queue:<queue>"`, as the claim logs
    them) in the rate's window at `now`, counted by `limiter.start_counts` (which also
    deletes the entries older than the window, as every claim does).

    Args:
        rate: the limit of `limiter`.
        now: naive UTC.
        key: one bucket (a limit key, None: no key) whose next start time to read too;
            `EVERY_KEY` (default): counts only.

    Returns:
        A `RateNow`.
    """
    counts = start_counts(conn, name(conn), limiter, now, rate.window_seconds)
    next_at: dict[str | None, datetime] = {}
    over = 0 if key is EVERY_KEY else counts.get(key, 0) - rate.count
    if over >= 0 and key is not EVERY_KEY:
        # The window admits one more once its oldest start that fills it is window old.
        since = now - timedelta(seconds=rate.window_seconds)
        oldest = conn.execute(select(fs.c.started_at).where(
            fs.c.limiter == limiter, fs.c.limit_key == (NO_KEY if key is None else key),
            fs.c.started_at > since).order_by(fs.c.started_at).offset(over).limit(1)).scalar()
        if oldest is not None:
            next_at[key] = oldest + timedelta(seconds=rate.window_seconds)
    return RateNow(rate=rate, now=now, starts=dict(counts), next_at=next_at)
