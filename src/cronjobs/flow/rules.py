"""The flow-control rules of a handler class and of a queue, parsed and checked.

A handler may say (docs/handlers.md, "Limits"):

- `CONCURRENCY = N`: at most N rows of its type `running` at once, all workers together;
- `RATE_LIMIT = "30/s"` (`/s`, `/m`, `/h`): at most that many starts per rolling window;
- `LIMIT_KEY = "chat_id"` (a payload field) or a method `limit_key(payload) -> str | None`:
  both limits then apply per value of the key; a row without a key shares the type's
  bucket of keyless rows.

A queue's settings (`[queues.NAME] concurrency`, `rate_limit`) limit the queue as a whole.
Both levels apply together. The claim enforces them (`store.limiter.FlowControl`, built
by `executor.flow_control` from `handler_limits` and `queue_limits`); the views that
explain a hold read them from here too (`flowstate`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidJob

WINDOWS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*\Z")


@dataclass(frozen=True)
class Rate:
    """A rate limit: at most `count` starts in any rolling `window_seconds`."""

    count: int
    window_seconds: float

    def __str__(self) -> str:
        unit = {v: k for k, v in WINDOWS.items()}[self.window_seconds]
        return f"{self.count}/{unit}"


@dataclass(frozen=True)
class Limits:
    """The limits of one handler type or one queue.

    Attributes:
        concurrency: at most this many running rows (per key, for a keyed type); None: no limit.
        rate: at most this many starts per rolling window (per key); None: no limit.
        keyed: the type has a LIMIT_KEY (or `limit_key`): the limits apply per key.
    """

    concurrency: int | None = None
    rate: Rate | None = None
    keyed: bool = False

    def __bool__(self) -> bool:
        return self.concurrency is not None or self.rate is not None


def parse_rate(value: object, what: str = "RATE_LIMIT") -> Rate | None:
    """Parse `"30/s"`, `"100/m"`, `"5/h"` (count >= 1); None stays None.

    Raises:
        ValueError: naming `what` and the value.
    """
    if value is None:
        return None
    match = _RATE.match(value) if isinstance(value, str) else None
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"{what} must look like '30/s', '100/m' or '5/h' (a count >= 1 per "
                         f"second, minute or hour), got {value!r:.60}")
    return Rate(int(match.group(1)), WINDOWS[match.group(2)])


def check_concurrency(value: object, what: str = "CONCURRENCY") -> int | None:
    """`value` if it is None or an int >= 1.

    Raises:
        ValueError: naming `what` and the value.
    """
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or value < 1):
        raise ValueError(f"{what} must be an integer >= 1 (or None for no limit), "
                         f"got {value!r:.60}")
    return value


def handler_limits(cls: type) -> Limits:
    """The limits a handler class declares (`CONCURRENCY`, `RATE_LIMIT`, `LIMIT_KEY` or
    a `limit_key` method), checked.

    Raises:
        ValueError: a bad value, naming the constant and the value (the registry turns it
            into a `HandlerError` naming the class).
    """
    concurrency = check_concurrency(getattr(cls, "CONCURRENCY", None))
    rate = parse_rate(getattr(cls, "RATE_LIMIT", None))
    field = getattr(cls, "LIMIT_KEY", None)
    if field is not None and (not isinstance(field, str) or not field.strip()):
        raise ValueError(f"LIMIT_KEY must be the name of a payload field (a non-empty "
                         f"string), got {field!r:.60}")
    if field is not None and field != field.strip():  # a payload field named " chat_id"?
        raise ValueError(f"LIMIT_KEY {field!r:.60} has spaces around the field name: no "
                         f"payload field is named that way; write LIMIT_KEY = "
                         f"{field.strip()!r:.60}")
    method = getattr(cls, "limit_key", None)
    if field is not None and method is not None:
        raise ValueError(f"set LIMIT_KEY ({field!r}) or define limit_key(payload), not both")
    if method is not None and not callable(method):
        raise ValueError(f"limit_key must be a method limit_key(payload) -> str | None, "
                         f"got {method!r:.60}")
    return Limits(concurrency, rate, keyed=field is not None or method is not None)


def key_field(cls: type) -> str | None:
    """How a handler class keys its limits, as the pages show it: its LIMIT_KEY (a
    payload field), `"limit_key()"` when it computes the key, else None."""
    field = getattr(cls, "LIMIT_KEY", None)
    if field is None and callable(getattr(cls, "limit_key", None)):
        return "limit_key()"
    return field


def queue_limits(queues: Mapping[str, Any]) -> dict[str, Limits]:
    """`{queue: Limits}` of the settings' `[queues.<queue>]` tables (objects with
    `concurrency` and `rate_limit`, as `config.QueueSettings`), the limited ones only.

    Raises:
        ValueError: a rate that does not parse (the settings checked it already).
    """
    out = {}
    for name, table in sorted(queues.items()):
        limits = Limits(getattr(table, "concurrency", None),
                        parse_rate(getattr(table, "rate_limit", None), "rate_limit"))
        if limits:
            out[name] = limits
    return out


def key_of(cls: type | None, payload: dict[str, Any]) -> str | None:
    """The limit key of a new row of handler `cls` with `payload`: the payload's
    LIMIT_KEY field (numbers as text) or `cls().limit_key(payload)`; None when the
    handler has neither, the field is missing or null, or the method returns None.

    Raises:
        InvalidJob: the key is not a string or number (the caller checks its length:
            `limits.LIMIT_KEY_MAX_CHARS`), or the handler's `limit_key` raised.
    """
    if cls is None:
        return None
    field = getattr(cls, "LIMIT_KEY", None)
    if field is not None:
        value = payload.get(field)
    elif getattr(cls, "limit_key", None) is not None:
        try:
            value = cls().limit_key(payload)
        except Exception as exc:  # the handler's code: one line naming it, not a traceback
            raise InvalidJob(f"limit key of {cls.__name__}: limit_key(payload) raised "
                             f"{type(exc).__name__}: {exc}"[:300]) from None
    else:
        return None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidJob(f"limit key of {cls.__name__} must be a string or a number, "
                         f"got {value!r:.60}")
    return str(value)
