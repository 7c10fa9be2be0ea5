"""Start jobs over HTTP: `POST /api/jobs` (one) and `POST /api/jobs:batch` (up to 1,000,
all or nothing).

A body is a JSON object whose fields (`FIELDS`, the one table of them) are the keyword
arguments of `queue.dispatch` under the names of `cronjobs dispatch --stdin`'s lines. Rows
are written by `queue.submit` (one row; its idempotency-key rules, the broker message after
the commit); a batch by `queue.submit` per row in one Session, whose commit sends the
messages and whose rollback (any bad row) leaves nothing. Answers are JSON: `{"error"}`
with one line for a refusal.

Sizes: a body may be `ONE_MAX_BYTES` (`/api/jobs`) or `BATCH_MAX_BYTES` (a batch) once
the token is checked (`auth.LARGE_FORMS`); a request without it gets the dashboard's 64 KB.
"""

from __future__ import annotations

import difflib
import json
from datetime import datetime

from flask import Blueprint, request
from sqlalchemy.orm import Session
from werkzeug.exceptions import RequestEntityTooLarge

from .. import limits, queue, store
from ..clock import parse_utc
from ..errors import InvalidJob
from ..job.rows import REMOTE_REMEDY
from ..tracing import incoming
from .scopes import requires, type_refusal
from .view import cronjobs_app

bp = Blueprint("dispatchapi", __name__)

BATCH_MAX_ROWS = 1_000
ONE_MAX_BYTES = limits.STDIN_LINE_MAX_BYTES  # a payload of PAYLOAD_MAX_BYTES, escaped
BATCH_MAX_BYTES = 16_000_000  # 1,000 rows of 16 KB, or fewer larger ones
# A body's field -> the keyword of `queue.submit`.
FIELDS = {"type": "type", "payload": "payload", "key": "idempotency_key",
          "priority": "priority", "at": "scheduled_at", "title": "title",
          "parent": "parent_id", "depends_on": "depends_on", "max_attempts": "max_attempts",
          "allow_failed": "allow_failed", "expires_at": "expires_at",
          "expires_in": "expires_in", "callback_url": "callback_url"}
TIMES = ("at", "expires_at")
HEADER = "Idempotency-Key"


class Refused(Exception):
    """A request answered with `status` and the JSON `{"error": message, **extra}`."""

    def __init__(self, status: int, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status, self.extra = status, extra

    def answer(self) -> tuple[dict, int]:
        """The Flask response value."""
        return {"error": str(self), **self.extra}, self.status


def read_bytes(max_bytes: int) -> bytes:
    """The request's raw body, at most `max_bytes` bytes.

    The route's `request.max_content_length` must be `max_bytes + 1` (`auth.require_login`
    sets it for the routes under `/api/`): a chunked body (no Content-Length) is read up to
    one byte past the limit, so a longer one is a 413, never a prefix cut at the limit.

    Raises:
        Refused: 413 over `max_bytes`.
    """
    try:
        data = request.get_data(cache=False)
    except RequestEntityTooLarge:
        data = None
    if data is None or len(data) > max_bytes:
        size = (f"{request.content_length:,} bytes" if request.content_length
                else f"over {max_bytes:,} bytes")
        raise Refused(413, f"the body is {size}; the limit is {max_bytes:,} bytes")
    return data


def decode_json(data: bytes) -> object:
    """`data` (the body's bytes) decoded as UTF-8 JSON.

    Raises:
        Refused: 400 not UTF-8 or not JSON (a number over Python's digit limit too); 422
            nested deeper than the parser goes.
    """
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Refused(400, f"the body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise Refused(400, f"the body is not valid JSON ({exc.msg} at line {exc.lineno} "
                           f"column {exc.colno})") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise Refused(400, f"the body is not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise Refused(422, f"the body is nested more than {limits.JSON_MAX_DEPTH} levels deep "
                           f"(objects and arrays inside each other); the limit is "
                           f"{limits.JSON_MAX_DEPTH}") from None


def read_body(max_bytes: int) -> object:
    """The request's JSON body, decoded.

    Args:
        max_bytes: the largest body taken, in bytes (the route's limit).

    Raises:
        Refused: 415 not `application/json`; 413 over `max_bytes`; 400 not UTF-8 or not
            JSON; 422 nested deeper than the parser goes.
    """
    if request.mimetype != "application/json":
        raise Refused(415, f"send the body as Content-Type: application/json, "
                           f"got {request.mimetype or 'none'!r:.60}")
    return decode_json(read_bytes(max_bytes))


def json_kind(value: object) -> str:
    """The JSON name of `value`'s kind: object, array, string, number, boolean or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    kinds = ((dict, "object"), (list, "array"), (str, "string"), ((int, float), "number"))
    return next((name for kind, name in kinds if isinstance(value, kind)),
                type(value).__name__)


def parse_job(data: object, where: str = "") -> dict:
    """One job of a body as the keyword arguments of `queue.submit`.

    Args:
        data: the decoded JSON object: `type` (required) and the other `FIELDS`; `at`
            and `expires_at` ISO 8601 (UTC if naive, `Z` allowed).
        where: the prefix of an error (`"jobs[3]: "` in a batch).

    Raises:
        Refused: 422 naming the problem: not an object, an unknown field (with a "did
            you mean"), no type, a bad time; 403 a type above the token's scope.
    """
    if not isinstance(data, dict):
        what = "a job" if where else "the body"
        raise Refused(422, f'{where}{what} must be a JSON object like {{"type": "a.b.execute", '
                           f'"payload": {{}}}}, got {json_kind(data)}')
    for name in data:
        if name not in FIELDS:
            close = difflib.get_close_matches(name, FIELDS, 1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise Refused(422, f"{where}unknown field {name[:60]!r}{hint}; the fields are "
                               f"{', '.join(FIELDS)}")
    if "type" not in data:
        raise Refused(422, f'{where}no "type" (the job type, e.g. "a.b.execute")')
    if refused := type_refusal(cronjobs_app(), data["type"]):  # its DISPATCH_SCOPE
        raise Refused(403, f"{where}{refused}")
    job = {FIELDS[name]: value for name, value in data.items()}
    for name in TIMES:
        if data.get(name) is not None:
            job[FIELDS[name]] = _time(data[name], f"{where}{name}")
    return job


def _time(value: object, name: str) -> datetime:
    """`value`, an ISO 8601 text (UTC if naive), as naive UTC; as `cronjobs dispatch --at`."""
    if not isinstance(value, str):
        raise Refused(422, f"{name} must be an ISO 8601 time as a string, got {value!r:.40}")
    try:
        return parse_utc(value)
    except ValueError as exc:
        raise Refused(422, f"{name} is {exc}: {value!r:.60}") from None


def header_key() -> str | None:
    """The `Idempotency-Key` header as UTF-8 text (WSGI hands it over as latin-1), or None.

    Raises:
        Refused: 400 when it is not UTF-8, or holds a comma (repeated headers arrive joined
            by commas: give one; a key with a comma goes in the body's `key`).
    """
    header = request.headers.get(HEADER)
    if header is None:
        return None
    try:
        text = header.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise Refused(400, f"the {HEADER} header is not UTF-8: {header[:60]!r}") from None
    if "," in text:
        raise Refused(400, f"give one {HEADER} header without commas (repeated headers "
                           f"arrive joined by commas), got {text[:60]!r}; a key with a comma "
                           f"goes in the body's key")
    return text


def _with_header_key(job: dict) -> dict:
    """`job` with the `Idempotency-Key` header as its key (400 when both differ)."""
    header = header_key()
    if header is None:
        return job
    given = job.get("idempotency_key")
    if given is not None and given != header:
        raise Refused(400, f"the {HEADER} header ({header[:60]!r}) and the body's key "
                           f"({str(given)[:60]!r}) differ; give one, or the same")
    return dict(job, idempotency_key=header)


def _invalid(exc: InvalidJob) -> str:
    """The message of `exc` as an HTTP client can act on it: an unknown type's remedy is
    CRONJOBS_REMOTE_TYPES only (no `known_type=False` over HTTP)."""
    return str(exc).replace(REMOTE_REMEDY, "list it in CRONJOBS_REMOTE_TYPES")


def _conflict(job: dict, found: queue.Dispatched, held_type: str, where: str = "") -> None:
    """Raise 409 when the key's row `found` holds another payload or type than `job`."""
    if found.created or (found.payload_matches and held_type == job["type"]):
        return
    what = "payload" if held_type == job["type"] else f"type ({held_type})"
    raise Refused(409, f"{where}idempotency key {job['idempotency_key']!r:.80} is held by "
                       f"job {found.id} with another {what}", id=found.id)


@bp.post("/api/jobs")
@requires("dispatch")
def create_job():
    """Add one job: 201 `{"id", "created": true}`, or 200 `{"id", "created": false}` when
    its key (the body's `key` or the `Idempotency-Key` header) holds a row of the same
    type and payload; 409 when it holds another; 422 for a bad field (`{"error"}`)."""
    app = cronjobs_app()
    try:
        job = _with_header_key(parse_job(read_body(ONE_MAX_BYTES)))
        try:
            with incoming(request.headers):  # the caller's `traceparent`, if tracing
                found = queue.submit(app=app, **job)
        except InvalidJob as exc:
            raise Refused(422, _invalid(exc)) from None
        if not found.created:
            held = queue.get(found.id, ["type"], app=app) or {"type": job["type"]}
            _conflict(job, found, held["type"])
    except Refused as refused:
        return refused.answer()
    return {"id": found.id, "created": found.created}, 201 if found.created else 200


def _jobs_of(body: object) -> list[dict]:
    """The parsed jobs of a batch body `{"jobs": [...]}`; 422 naming a bad one's index,
    or two rows of one key with another type or payload (`_same_keys`)."""
    if not isinstance(body, dict) or set(body) != {"jobs"} or not isinstance(body["jobs"], list):
        raise Refused(422, 'a batch must be a JSON object {"jobs": [{"type": ...}, ...]}, '
                           f'got {json_kind(body)}' + (
                               f" with {', '.join(map(repr, body))[:80]}"
                               if isinstance(body, dict) else ""))
    rows = body["jobs"]
    if not 1 <= len(rows) <= BATCH_MAX_ROWS:
        raise Refused(422, f"jobs has {len(rows):,} rows; give 1 to {BATCH_MAX_ROWS:,}")
    jobs = []
    for index, data in enumerate(rows):
        try:
            jobs.append(parse_job(data, f"jobs[{index}]: "))
        except Refused as refused:
            raise Refused(refused.status, str(refused), **refused.extra, index=index) from None
    _same_keys(jobs)
    return jobs


def _same_keys(jobs: list[dict]) -> None:
    """422 when two rows of a batch share a key with another type or payload, naming both
    indexes (nothing is written). Rows of one key, type and payload are one row: each
    answers its id (the first `created`, the others not), as a repeated request would."""
    first: dict[str, tuple[int, str]] = {}
    for index, job in enumerate(jobs):
        key = job.get("idempotency_key")
        if not isinstance(key, str):
            continue
        try:
            same = json.dumps([job["type"], job.get("payload") or {}], sort_keys=True)
        except (TypeError, ValueError):
            continue  # a payload submit refuses (422 naming it)
        if key not in first:
            first[key] = (index, same)
        elif first[key][1] != same:
            raise Refused(422, f"jobs[{index}]: idempotency key {key!r:.80} is also the key of "
                               f"jobs[{first[key][0]}], with another type or payload; nothing "
                               f"was written", index=index, other_index=first[key][0])


def _submit_all(app, jobs: list[dict]) -> list[queue.Dispatched]:
    """Every job in one transaction (the broker messages after its commit); nothing
    written when one is refused (422 or 409 naming its index)."""
    done: list[queue.Dispatched] = []
    with Session(app.engine) as session, session.begin():
        for index, job in enumerate(jobs):
            where = f"jobs[{index}]: "
            try:
                found = queue.submit(app=app, session=session, **job)
            except InvalidJob as exc:
                raise Refused(422, f"{where}{_invalid(exc)}; nothing was written",
                              index=index) from None
            if not found.created:
                held = store.get_job(session.connection(), found.id, ["type"])
                try:
                    _conflict(job, found, held["type"] if held else job["type"], where)
                except Refused as refused:
                    raise Refused(409, str(refused), **refused.extra, index=index) from None
            done.append(found)
    return done


@bp.post("/api/jobs:batch")
@requires("dispatch")
def create_jobs():
    """Add up to 1,000 jobs, all or nothing: 201 `{"jobs": [{"id", "created"}, ...]}` in
    input order (200 when none was created); 422 or 409 naming the first bad row's
    `index`, and nothing written."""
    try:
        if HEADER in request.headers:
            raise Refused(400, f"{HEADER} is for POST /api/jobs; give each batch row a key")
        jobs = _jobs_of(read_body(BATCH_MAX_BYTES))
        with incoming(request.headers):  # the caller's `traceparent`, if tracing
            done = _submit_all(cronjobs_app(), jobs)
    except Refused as refused:
        return refused.answer()
    answer = [{"id": found.id, "created": found.created} for found in done]
    return {"jobs": answer}, 201 if any(found.created for found in done) else 200


def _job_schema() -> dict:
    """The JSON schema of one job of a body (OpenAPI 3.1: JSON Schema 2020-12)."""
    text, integer = {"type": "string"}, {"type": "integer"}
    time = {"type": "string", "format": "date-time", "description": "ISO 8601, UTC if naive"}
    return {"type": "object", "required": ["type"], "additionalProperties": False,
            "properties": {
                "type": dict(text, description="a registered job type, or a remote one"),
                "payload": {"type": "object", "description": "handed to handle(); at most "
                            "1,000,000 bytes of JSON, nested at most 100 levels"},
                "key": dict(text, maxLength=limits.KEY_MAX_CHARS,
                            description="idempotency key (unique over the table)"),
                "priority": dict(integer, description="lower runs first (default 5)"),
                "at": dict(time, description="do not run before (ISO 8601, UTC if naive)"),
                "title": dict(text, maxLength=limits.TITLE_MAX_CHARS),
                "parent": dict(integer, minimum=1),
                "depends_on": {"type": "array", "items": dict(integer, minimum=1)},
                "max_attempts": dict(integer, minimum=1),
                "allow_failed": {"type": "boolean"},
                "expires_at": time,
                "expires_in": {"type": ["number", "string"], "description": "90, \"30s\""},
                "callback_url": dict(text, format="uri", maxLength=limits.URL_MAX_CHARS,
                                     description="http(s) URL: the signed webhook of each "
                                     "finished attempt (docs/webhooks.md)")}}


def _errors(*codes: str) -> dict:
    error = {"content": {"application/json": {"schema": {
        "type": "object", "properties": {"error": {"type": "string"}, "id": {"type": "integer"},
                                         "index": {"type": "integer"},
                                         "other_index": {"type": "integer"}}}}}}
    texts = {"400": "not JSON, not UTF-8, or the key header and body differ, or the "
                    "header is repeated or not UTF-8",
             "401": "no token, a wrong or a revoked one",
             "403": "the token lacks dispatch, or a row type's DISPATCH_SCOPE (built-ins: admin)",
             "409": "the key is held by a row of another payload or type (its `id`; in a "
                    "batch, the row's `index` too)",
             "413": "the body is too large", "415": "not application/json",
             "422": "a bad field, an unknown type (did you mean), a limit; in a batch, the "
                    "row's `index` (two rows of one key with other payloads: both named)"}
    return {code: dict(error, description=texts[code]) for code in codes}


def _created(schema: dict) -> dict:
    return {"content": {"application/json": {"schema": schema}}}


_ONE = {"type": "object", "properties": {"id": {"type": "integer"},
                                        "created": {"type": "boolean"}}}
OPENAPI: dict = {
    "/api/jobs": {"post": {
        "summary": "Start a job",
        "operationId": "createJob",
        "parameters": [{"name": HEADER, "in": "header", "required": False,
                        "schema": {"type": "string", "maxLength": limits.KEY_MAX_CHARS},
                        "description": "the row's idempotency key (as the body's key)"}],
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": _job_schema()}}},
        "responses": {"201": dict(_created(_ONE), description="created"),
                      "200": dict(_created(_ONE), description="the key's row, same payload"),
                      **_errors("400", "401", "403", "409", "413", "415", "422")}}},
    "/api/jobs:batch": {"post": {
        "summary": "Start up to 1,000 jobs, all or nothing",
        "operationId": "createJobs",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["jobs"], "properties": {"jobs": {
                "type": "array", "minItems": 1, "maxItems": BATCH_MAX_ROWS,
                "items": _job_schema()}}}}}},
        "responses": {
            "201": dict(_created({"type": "object", "properties": {
                "jobs": {"type": "array", "items": _ONE}}}), description="in input order"),
            "200": {"description": "no row created (every key held)"},
            **_errors("400", "401", "403", "409", "413", "415", "422")}}},
}
