"""Waiting for a row's outcome: `Result` (what a final row holds) and `wait`, the loop
behind `queue.wait`.

`wait` reads the row with a short poll that backs off (50 ms doubling to 1 s), never a
tight loop: a row that ends while it waits is seen within about a second. The dashboard's
`GET /api/jobs/ID/result` shares one poll between all its waiting requests
(`cronjobs.web.results`), built on `read_results`.
"""

from __future__ import annotations

import json
import numbers
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine

from ..errors import InvalidJob, JobNotFound
from ..status import FINAL
from ..store.jobs import outcomes

FIRST_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 1.0
MAX_WAIT_SECONDS = 366 * 24 * 3600  # a year: anything longer is a mistake


@dataclass(frozen=True)
class Result:
    """What a row holds when it is read for `queue.wait` (final, or as last seen).

    Attributes:
        id: the row id.
        status: the row's status (`completed`, `failed`, `cancelled`, `expired` once final).
        result: the stored result (`result_payload`) decoded from JSON; None when there is
            none; the stored text itself when it is not JSON.
        error: the last error text, or None.
        finished_at: when the row ended, an aware UTC datetime; None while unfinished.
    """

    id: int
    status: str
    result: Any
    error: str | None
    finished_at: datetime | None

    @property
    def final(self) -> bool:
        """True when the row will not change by itself any more (a final status)."""
        return self.status in FINAL

    def as_dict(self) -> dict:
        """The JSON form: `{"id", "status", "result", "error", "finished_at"}`, the time
        as ISO 8601 UTC text (`...Z`) or None."""
        at = self.finished_at
        return {"id": self.id, "status": self.status, "result": self.result,
                "error": self.error,
                "finished_at": at.replace(tzinfo=None).isoformat() + "Z" if at else None}


def to_result(row: dict) -> Result:
    """A `Result` from a row of `store.jobs.outcomes` (its stored JSON decoded)."""
    text = row["result_payload"]
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        value = text
    at = row["finished_at"]
    return Result(id=row["id"], status=row["status"], result=value, error=row["error"],
                  finished_at=at.replace(tzinfo=UTC) if at is not None else None)


def read_results(engine: Engine, ids: Collection[int]) -> dict[int, Result]:
    """The rows of `ids` as `Result`s, in one statement per 1,000 ids, keyed by id (an id
    without a row is missing)."""
    with engine.connect() as conn:  # a plain read (no write lock on SQLite)
        rows = outcomes(conn, ids)
    return {job_id: to_result(row) for job_id, row in rows.items()}


def check_timeout(timeout: float | None) -> float | None:
    """`timeout` as seconds, or None (wait for ever).

    Raises:
        InvalidJob: not a real number (`numbers.Real` or a `Decimal`: int, float, Fraction; not
            a bool) from 0 to a year (NaN and infinity refused).
    """
    if timeout is None:
        return None
    seconds = float("nan")
    if isinstance(timeout, (numbers.Real, Decimal)) and not isinstance(timeout, bool):
        try:  # any real number: int, float, Decimal, Fraction
            seconds = float(timeout)
        except (ValueError, OverflowError):  # Decimal("sNaN"), a huge Fraction
            pass
    if not 0 <= seconds <= MAX_WAIT_SECONDS:  # NaN is refused here too
        raise InvalidJob(f"timeout must be a number of seconds from 0 to {MAX_WAIT_SECONDS} "
                         f"or None, got {timeout!r:.80}")
    return seconds


def check_id(job_id: object) -> int:
    """`job_id` when it is a row id: an int (not a bool) from 1 to 2**63 - 1.

    Raises:
        InvalidJob: anything else (`1.9`, `True`, `"7"`, None, 2**63), named in the message.
    """
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 1 <= job_id < 2**63:
        raise InvalidJob(f"job id must be an int from 1 to {2**63 - 1}, got {job_id!r:.80}")
    return job_id


def wait(engine: Engine, job_id: int, timeout: float | None,
         sleep: Callable[[float], Any] = time.sleep) -> Result:
    """Read row `job_id` until its status is final; return it as a `Result`.

    Args:
        engine: the database to read.
        job_id: the row id.
        timeout: seconds to wait at most (0: read once); None waits for ever.
        sleep: how to pause between reads (seconds).

    Raises:
        JobNotFound: no row `job_id` (also when it is deleted while waited for).
        TimeoutError: not final after `timeout` seconds; the message names the row and
            the status last seen.
        InvalidJob: a bad `timeout`.
    """
    timeout = check_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = FIRST_POLL_SECONDS
    while True:
        found = read_results(engine, [job_id]).get(job_id)
        if found is None:
            raise JobNotFound(f"no job with id {job_id}")
        if found.final:
            return found
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError(f"job {job_id} is still {found.status} after waiting "
                               f"{timeout:g} s")
        sleep(pause if left is None else min(pause, left))
        pause = min(pause * 2, MAX_POLL_SECONDS)
