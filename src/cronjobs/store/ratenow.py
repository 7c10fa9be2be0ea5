"""What a rate limit admits at an instant, read from the claim's own start log: how many
more starts of a bucket (a type's key, a queue) it admits now, and when it admits the
next one. The held-rows counts (`held`) and the Job page's "waits for the rate limit"
ask here, so they say what the claim (`limiter.FlowPolicy`) would do.

`rate_now` is the one place outside the claim that applies the rate rule, and it applies
it through the claim's own `limiter.start_counts`; only the time of the next start is
read here.
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

EVERY_KEY = object()  # `rate_now(key=...)`: every key's room, no time of a next start


@dataclass(frozen=True)
class RateNow:
    """A rate limit at one instant (`rate_now`).

    Attributes:
        fresh: the starts it admits now for a key with no start in its window.
        admitted: `{key (None: no key): starts it admits now}` of the keys with starts in
            the window.
        next_in: `{key: seconds until it admits a start}`, for the key asked about when
            it admits none now.
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
             key: object = EVERY_KEY) -> RateNow:
    """What `rate` of `limiter` (`"type:<type>"` or `"queue:<queue>"`, as the claim logs
    its starts) admits at `now`, from the starts `limiter.start_counts` counts in the
    window (it also deletes the entries older than the window, as every claim does).

    Args:
        rate: the limit of `limiter`.
        now: naive UTC.
        key: one bucket (a limit key; None: no key) whose next start time to read too;
            `EVERY_KEY` (default): only what each key admits now.

    Returns:
        A `RateNow`.
    """
    counts = start_counts(conn, name(conn), limiter, now, rate.window_seconds)
    next_in: dict[str | None, float] = {}
    over = 0 if key is EVERY_KEY else counts.get(key, 0) - rate.count
    if over >= 0 and key is not EVERY_KEY:
        # The window admits one more once the start that fills it is a window old.
        since = now - timedelta(seconds=rate.window_seconds)
        oldest = conn.execute(select(fs.c.started_at).where(
            fs.c.limiter == limiter, fs.c.limit_key == (NO_KEY if key is None else key),
            fs.c.started_at > since).order_by(fs.c.started_at).offset(over).limit(1)).scalar()
        if oldest is not None:
            next_in[key] = max(0.0, (oldest - now).total_seconds() + rate.window_seconds)
    return RateNow(fresh=rate.count,
                   admitted={k: max(0, rate.count - n) for k, n in counts.items()},
                   next_in=next_in)
