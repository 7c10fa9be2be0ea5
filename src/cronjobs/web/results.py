"""`GET /api/jobs/ID/result?wait=SECONDS`: a row's outcome, waited for.

200 `{"id", "status", "result", "error", "finished_at"}` once the row is final (at once
when it is already), 202 `{"id", "status"}` when `wait` seconds pass first, 404 for an
unknown id, 400 for a bad `wait` (0 to 60 seconds; default 0: answer at once).

The waiting requests of one dashboard process share ONE `ResultWaiter`: a thread that
reads every awaited row in one statement every `POLL_SECONDS` and wakes the requests whose
row ended (each request waits on its own `threading.Event`). 200 waiting requests cost one
query per interval, not 200, and hold no database connection while they wait; the
Werkzeug server runs each request in a thread of its own, so the pages stay quick.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from dataclasses import dataclass, field

from flask import Blueprint, abort, current_app, jsonify, request
from sqlalchemy import Engine

from ..job.waiting import Result, read_results
from .scopes import requires
from .view import cronjobs_app

log = logging.getLogger("cronjobs.web")

bp = Blueprint("results", __name__)

MAX_WAIT_SECONDS = 60
POLL_SECONDS = 0.6  # one statement per interval for all waiters: a row seen <= ~0.7 s late
_make_lock = threading.Lock()


@dataclass
class _Entry:
    """One waiting request: woken (`event`) with the row's final `result`, or `missing`."""

    status: str
    event: threading.Event = field(default_factory=threading.Event)
    result: Result | None = None
    missing: bool = False


class ResultWaiter:
    """The shared waiter of one dashboard process.

    Args:
        engine: the database to read (the dashboard's engine).
        interval: seconds between two reads of the awaited rows (default `POLL_SECONDS`).

    Attributes:
        queries: how many reads the thread made (one statement per 1,000 awaited ids).
    """

    def __init__(self, engine: Engine, interval: float = POLL_SECONDS) -> None:
        self.engine = engine
        self.interval = interval
        self.queries = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, list[_Entry]] = {}
        self._thread: threading.Thread | None = None

    @property
    def awaited(self) -> int:
        """How many requests wait now."""
        with self._lock:
            return sum(len(entries) for entries in self._waiting.values())

    def wait(self, job_id: int, status: str, timeout: float) -> _Entry:
        """Wait up to `timeout` seconds for row `job_id` (last seen with `status`) to be
        final. Returns the request's entry: `result` set when final, `missing` when the
        row is gone, else `status` is the status last seen."""
        entry = _Entry(status)
        with self._lock:
            self._waiting.setdefault(job_id, []).append(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="cronjobs-result-waiter")
                self._thread.start()
        try:
            entry.event.wait(timeout)
        finally:
            with self._lock:
                entries = self._waiting.get(job_id, [])
                if entry in entries:
                    entries.remove(entry)
                    if not entries:
                        del self._waiting[job_id]
        return entry

    def _run(self) -> None:
        """Read the awaited rows every `interval` until nobody waits."""
        stop = threading.Event()
        while True:
            stop.wait(self.interval)
            with self._lock:
                ids = list(self._waiting)
                if not ids:
                    self._thread = None
                    return
            try:
                found = read_results(self.engine, ids)
            except Exception:  # the database is down: the requests time out with 202
                log.warning("result waiter: cannot read %d rows", len(ids), exc_info=True)
                continue
            finally:
                self.queries += (len(ids) + 999) // 1000
            self._wake(ids, found)

    def _wake(self, ids: list[int], found: dict[int, Result]) -> None:
        with self._lock:
            for job_id in ids:
                entries = self._waiting.get(job_id)
                if not entries:
                    continue
                row = found.get(job_id)
                for entry in entries:
                    if row is None:
                        entry.missing = True
                    else:
                        entry.status = row.status
                        entry.result = row if row.final else None
                    if row is None or row.final:
                        entry.event.set()
                if row is None or row.final:
                    del self._waiting[job_id]


def result_waiter() -> ResultWaiter:
    """The shared `ResultWaiter` of this dashboard (made on first use)."""
    waiter = current_app.extensions.get("cronjobs_result_waiter")
    if waiter is None:
        with _make_lock:
            waiter = current_app.extensions.get("cronjobs_result_waiter")
            if waiter is None:
                waiter = ResultWaiter(cronjobs_app().engine)
                current_app.extensions["cronjobs_result_waiter"] = waiter
    return waiter


def wait_seconds(text: str | None) -> float:
    """`?wait=` as seconds (absent: 0). Aborts with 400 unless a plain decimal number
    (`5`, `2.5`) from 0 to 60."""
    if text is None or text == "":
        return 0.0
    # plain decimals only: float() would take "1_0", " 5", "1e1" and non-ASCII digits
    value = float(text) if re.fullmatch(r"[0-9]{1,6}(?:\.[0-9]{1,9})?", text) else math.nan
    if not 0 <= value <= MAX_WAIT_SECONDS:  # NaN and infinity fail too
        abort(400, f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS}, "
                   f"got {text!r}")
    return value


@bp.get("/api/jobs/<id:job_id>/result")
@requires("read")
def result(job_id: int):
    """Row `job_id`'s outcome: 200 once final, 202 `{"id", "status"}` after `?wait=`
    seconds (0 to 60) without an end, 404 for an unknown id, 400 for a bad `wait`."""
    timeout = wait_seconds(request.args.get("wait"))
    row = read_results(cronjobs_app().engine, [job_id]).get(job_id)
    if row is None:
        abort(404, f"no job with id {job_id}")
    if row.final:
        return jsonify(row.as_dict())
    if timeout > 0:
        entry = result_waiter().wait(job_id, row.status, timeout)
        if entry.missing:
            abort(404, f"no job with id {job_id}")
        if entry.result is not None:
            return jsonify(entry.result.as_dict())
        return jsonify({"id": job_id, "status": entry.status}), 202
    return jsonify({"id": job_id, "status": row.status}), 202


_OUTCOME = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "status": {"type": "string",
                   "enum": ["completed", "failed", "cancelled", "expired"]},
        "result": {"description": "the stored result, decoded from JSON"},
        "error": {"type": ["string", "null"]},
        "finished_at": {"type": ["string", "null"], "format": "date-time"},
    },
    "required": ["id", "status", "result", "error", "finished_at"],
}
_ERROR = {"content": {"application/json": {"schema": {
    "type": "object", "properties": {"error": {"type": "string"}}}}}}

OPENAPI: dict = {"/api/jobs/{job_id}/result": {"get": {
    "summary": "A job's outcome, waited for",
    "description": "Answers 200 as soon as the row is final (completed, failed, cancelled, "
                   "expired), 202 with its status when `wait` seconds pass first.",
    "operationId": "getJobResult",
    "tags": ["jobs"],
    "x-cronjobs-scope": "read",
    "parameters": [
        {"name": "job_id", "in": "path", "required": True, "schema": {"type": "integer"}},
        {"name": "wait", "in": "query", "required": False,
         "description": "seconds to wait for the end (0 to 60; default 0)",
         "schema": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS}},
    ],
    "responses": {
        "200": {"description": "the row is final",
                "content": {"application/json": {"schema": _OUTCOME}}},
        "202": {"description": "not final yet: its status",
                "content": {"application/json": {"schema": {
                    "type": "object", "required": ["id", "status"],
                    "properties": {"id": {"type": "integer"},
                                   "status": {"type": "string"}}}}}},
        "400": {"description": "a bad `wait`", **_ERROR},
        "401": {"description": "no token", **_ERROR},
        "404": {"description": "no job with this id", **_ERROR},
    },
}}}
