"""Durations as people write them: a number of seconds (`90`, `1.5`), a `timedelta`, or
text with a unit: `45s`, `30m`, `26h`, `7d` (a bare number in text is seconds too).

One reading for every place a duration is given: handler constants (`CATCHUP_WINDOW`,
`STARTING_DEADLINE`, `JITTER`, `EXPECT`), `[tasks.x]` keys, `--for`, `--expires-in`, the
dashboard's forms and the API.
"""

from __future__ import annotations

import re
from datetime import timedelta

YEAR_SECONDS = 366 * 86400
_TEXT = re.compile(r"\s*(\d{1,9}(?:\.\d{1,6})?)\s*([smhd]?)\s*\Z")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(value: object, *, name: str, zero: bool = False,
            maximum: float = YEAR_SECONDS) -> float:
    """A duration in seconds.

    Args:
        value: an int or float (seconds), a `timedelta`, or text: `90`, `45s`, `30m`,
            `26h`, `7d` (decimals allowed: `1.5h`).
        name: what the value is, for the error (`JITTER`, `--expires-in`).
        zero: accept 0 (else a duration must be more than 0).
        maximum: the largest accepted value, seconds (default a year).

    Returns:
        The duration in seconds (float).

    Raises:
        ValueError: one line naming `name` and the value: not a duration, negative, 0
            (unless `zero`), or over `maximum`.
    """
    found: float | None = None
    if isinstance(value, timedelta):
        found = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        found = float(value)
    elif isinstance(value, str):
        match = _TEXT.match(value)
        if match:
            found = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    least = "0 or more" if zero else "more than 0"
    if found is None or found != found or found < 0 or (found == 0 and not zero) \
            or found > maximum:
        raise ValueError(f"{name} must be a duration such as 90, 45s, 30m, 26h or 7d "
                         f"({least}, at most {_words(maximum)}), got {value!r:.60}")
    return found


def _words(limit: float) -> str:
    """`limit` seconds in words for an error: `a year`, `1 day`, `3600 s`."""
    if limit == YEAR_SECONDS:
        return "a year"
    if limit % 86400 == 0:
        return f"{int(limit // 86400)} d"
    return f"{limit:g} s"
