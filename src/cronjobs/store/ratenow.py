"""What a rate limit admits at an instant, read from the claim's own start log: how many
more starts of a bucket (a type's key, a queue) it admits now, and when it admits the
next one. The held-rows counts (`held`) and the Job page's "waits for the rate limit"
ask here, so they say what the claim (`limiter.FlowPolicy`) would do.

`rate_now` is the one place outside the claim that applies the rate rule, and it applies
it through the claim's own `limiter.rate_states` (starts spaced window/N apart, never
more than N in a rolling window: a bucket admits one start at a time).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from ..flowrules import Rate
from .limiter import rate_states

EVERY_KEY = object()  # `rate_now(key=...)`: every key's room (all have their next start)


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
             key: object = EVERY_KEY, db_clock: bool = False) -> RateNow:
    """What `rate` of `limiter` (`"type:<type>"` or `"queue:<queue>"`, as the claim logs
    its starts) admits at `now`, from `limiter.rate_states` (a read: nothing deleted).

    Args:
        rate: the limit of `limiter`.
        now: naive UTC; ignored with `db_clock`.
        key: kept for the callers: the time of the next start is known for every key.
        db_clock: judge with the database's clock, as the workers do when their clock is
            the system clock (`flow.uses_db_clock`).

    Returns:
        A `RateNow`.
    """
    states = rate_states(conn, limiter, rate, now, db_clock=db_clock)
    return RateNow(fresh=1, admitted={k: s.admits for k, s in states.items()},
                   next_in={k: s.next_in_seconds for k, s in states.items() if not s.admits})
