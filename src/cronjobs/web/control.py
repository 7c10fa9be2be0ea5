"""The operator's actions over HTTP, JSON in and out, for a Bearer token (docs/api.md):
retry, cancel and stop a row, run a task now, pause and resume a queue, type or task,
lift a block. Each is what the dashboard's button calls (`actions.operator`,
`schedule.manual.run_now`, `store.flow.pause`) and is recorded with the token's name
(`auth.who`: `token:NAME`). Errors are one JSON line `{"error": ...}`: 400 a bad body,
404 an unknown row, task, pause or block, 409 a row or task in the wrong state.
"""

from __future__ import annotations

import functools
import json

from flask import Blueprint, jsonify, request

from .. import limits, store
from ..actions import operator
from ..errors import (
    HandlerNotFound,
    InvalidJob,
    JobNotFound,
    JobStateError,
    TaskRefused,
)
from ..schedule.entries import schedule_tasks
from ..schedule.manual import run_now
from .auth import body_limit, who
from .dispatchapi import Refused, decode_json, json_kind, read_bytes
from .flow import pause_form
from .openapi import operation
from .scopes import requires, type_refusal
from .view import cronjobs_app

bp = Blueprint("control", __name__)
SELECTORS = ("queue", "type", "task")
CODES = ((InvalidJob, 400), (JobNotFound, 404), (HandlerNotFound, 404),
         (JobStateError, 409), (TaskRefused, 409))


def json_errors(view):
    """Answer the errors of `view` as `{"error": message}` with the code of `CODES` (a
    `Refused`: its own code)."""
    @functools.wraps(view)
    def wrapped(*args, **kwargs):
        try:
            return view(*args, **kwargs)
        except Refused as refused:
            return refused.answer()
        except tuple(kind for kind, _code in CODES) as exc:
            code = next(code for kind, code in CODES if isinstance(exc, kind))
            return jsonify(error=str(exc)), code
    return wrapped


def read_body(fields: tuple[str, ...], required: bool = True) -> dict:
    """The request's JSON object, with only `fields`; `{}` for an empty body when not
    `required`. String values only, except `payload` (an object), `force` (a boolean)
    and `id` (an integer).

    Raises:
        Refused: 413 over the route's limit (`auth.body_limit`); 415 a non-empty body
            that is not `Content-Type: application/json`; 400 not UTF-8 or not JSON.
        InvalidJob: nested too deep, not an object, an unknown field or a value of the
            wrong type (the message names it).
    """
    raw = read_bytes(body_limit(request.endpoint))
    if not raw.strip() and not required:
        return {}
    if raw.strip() and request.mimetype != "application/json":
        raise Refused(415, f"send the body as Content-Type: application/json, "
                           f"got {request.mimetype or 'none'!r:.60}")
    try:
        body = decode_json(raw)
    except Refused as refused:
        raise InvalidJob(str(refused)) from None
    if not isinstance(body, dict):
        raise InvalidJob(f"the body must be a JSON object with {', '.join(fields)}, got "
                         f"{json_kind(body)}")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise InvalidJob(f"unknown field {unknown[0][:40]!r} (expected {', '.join(fields)})")
    kinds = {"payload": dict, "force": bool, "id": int}
    for key, value in body.items():
        kind = kinds.get(key, str)
        if value is not None and (not isinstance(value, kind)
                                  or (kind is int and isinstance(value, bool))):
            raise InvalidJob(f"{key} must be a JSON {_json_kind(kind)}, got {value!r:.60}")
    return body


def _json_kind(kind: type) -> str:
    return {dict: "object", bool: "boolean", int: "integer"}.get(kind, "string")


@bp.post("/api/jobs/<id:job_id>/retry")
@requires("operate")
@json_errors
def retry(job_id: int):
    """Failed row `job_id` back to pending (attempts reset): `{"id", "status": "pending"}`;
    404 no such row, 409 not failed."""
    operator.retry(cronjobs_app(), job_id, who=who())
    return jsonify(id=job_id, status="pending")


@bp.post("/api/jobs/<id:job_id>/cancel")
@requires("operate")
@json_errors
def cancel(job_id: int):
    """Pending or waiting row `job_id` cancelled: `{"id", "status": "cancelled"}`; 404 no
    such row, 409 in another state."""
    operator.cancel(cronjobs_app(), job_id, who=who())
    return jsonify(id=job_id, status="cancelled")


@bp.post("/api/jobs/<id:job_id>/stop")
@requires("operate")
@json_errors
def stop(job_id: int):
    """Ask the worker running row `job_id` to stop it (`operator.stop`): `{"id",
    "attempts", "worker_id", "stop_requested": true}`; 404 no such row, 409 not running."""
    row = operator.stop(cronjobs_app(), job_id, who=who())
    return jsonify(id=job_id, attempts=row["attempts"], worker_id=row["worker_id"],
                   stop_requested=True)


@bp.post("/api/tasks/<task>/run")
@requires("operate")
@json_errors
def run_task(task: str):
    """Run `task` now (Run now): optional body `{"payload": {...}, "request_token",
    "force"}`; 201 `{"id", "created"}` (`created` false: the request token's earlier
    row); 404 unknown task, 409 disabled or still running (OVERLAP skip; `force`); 403
    a `payload` for a type whose DISPATCH_SCOPE is above the token's (the built-ins:
    admin; their own payload runs with operate)."""
    body = read_body(("payload", "request_token", "force"), required=False)
    app = cronjobs_app()
    if task not in schedule_tasks(app):
        raise HandlerNotFound(f"unknown task {task[:80]!r}")
    payload = body.get("payload")
    if payload and (refused := type_refusal(app, schedule_tasks(app)[task])):  # not {}
        return jsonify(error=f"{refused}; without a payload, operate may run it"), 403
    if payload is not None:
        limits.check_json_depth(payload, "payload")
        limits.check_json_size(json.dumps(payload), "payload", limits.PAYLOAD_MAX_BYTES)
    started = run_now(task, request_token=body.get("request_token"), again=True,
                      payload=payload, force=bool(body.get("force")), app=app, who=who())
    return jsonify(id=started.id, created=started.created), 201 if started.created else 200


def _selector(body: dict) -> tuple[str, str]:
    """The one `queue`, `type` or `task` of `body`: `(scope, name)`."""
    chosen = [key for key in SELECTORS if body.get(key) is not None]
    if len(chosen) != 1:
        raise InvalidJob(f"name exactly one of queue, type or task, got {chosen or 'none'}")
    return chosen[0], body[chosen[0]]


@bp.post("/api/pauses")
@requires("operate")
@json_errors
def pause():
    """Pause a queue, type or task: `{"queue"|"type"|"task": name, "for": "30m",
    "reason"}` (`for` absent: until resumed); a pause of the same target is replaced.
    201 with the pause `{scope, name, reason, created_by, created_at, until_at}`, and a
    `"warning"` when no handler knows the name (a typo? the pause holds all the same)."""
    body = read_body((*SELECTORS, "for", "reason"))
    scope, name = _selector(body)
    wanted = pause_form({"scope": scope, "name": name, "for": body.get("for"),
                         "reason": body.get("reason")})
    app = cronjobs_app()
    by = who()[:limits.FLOW_BY_MAX_CHARS]
    with app.engine.begin() as conn:
        now = store.flow.flow_now(conn, app.clock)
        until = now + wanted["for"] if wanted["for"] else None
        done = store.flow.pause(conn, scope, wanted["name"], now=now, until=until,
                                reason=wanted["reason"], by=by)
    answer = {k: (v.isoformat() + "Z" if hasattr(v, "isoformat") else v)
              for k, v in done.items()}
    warning = operator.unknown_target(app, scope, wanted["name"])
    if warning:
        answer["warning"] = warning
    return jsonify(answer), 201


@bp.post("/api/pauses/resume")
@requires("operate")
@json_errors
def resume():
    """Lift the pause of `{"queue"|"type"|"task": name}`: `{"scope", "name", "resumed":
    true}`; 404 when there is none."""
    scope, name = _selector(read_body(SELECTORS))
    if not operator.resume(cronjobs_app(), scope, name):
        return jsonify(error=f"no pause of {scope} {name[:80]!r}"), 404
    return jsonify(scope=scope, name=name, resumed=True)


@bp.post("/api/blocks/unblock")
@requires("operate")
@json_errors
def unblock():
    """Lift a block: `{"id": block id}` or `{"type": job type, "key": limit key}` (no
    `key`: the block of the whole type): `{"unblocked": true}`; 404 when there is none."""
    body = read_body(("id", "type", "key"))
    if (body.get("id") is None) == (body.get("type") is None):
        raise InvalidJob("name a block by id, or by type (and key)")
    if body.get("id") is not None and not 0 < body["id"] < 2**63:
        raise InvalidJob(f"id must be a block id (a positive whole number), got {body['id']}")
    if body.get("id") is not None and body.get("key") is not None:
        raise InvalidJob("key goes with type, not with id")
    lifted = operator.unblock(cronjobs_app(), body.get("id"), job_type=body.get("type"),
                              limit_key=body.get("key"))
    if not lifted:
        return jsonify(error="no such block (it may have ended)"), 404
    return jsonify(unblocked=True)


_ROW = {"404": "no such row", "409": "the row is not in a state for this"}  # no body read
_BODY = {"400": "bad body (not JSON, not UTF-8, an unknown field, a wrong value)",
         "413": "the body is over the route's limit",
         "415": "a non-empty body that is not application/json"}
OPENAPI: dict = {
    "/api/jobs/{job_id}/retry": {"post": operation(
        "Retry a failed row", {"200": "`{id, status: pending}`", **_ROW})},
    "/api/jobs/{job_id}/cancel": {"post": operation(
        "Cancel a pending or waiting row", {"200": "`{id, status: cancelled}`", **_ROW})},
    "/api/jobs/{job_id}/stop": {"post": operation(
        "Stop a running row", {"200": "`{id, attempts, worker_id, stop_requested}`", **_ROW})},
    "/api/tasks/{task}/run": {"post": operation(
        "Run a task now", {"201": "`{id, created: true}`", "200": "`{id, created: false}`: "
                           "the request token's earlier row", **_BODY, "404": "no such task",
                           "409": "the task is disabled or still running"},
        body={"payload": "object", "request_token": "string", "force": "boolean"})},
    "/api/pauses": {"post": operation(
        "Pause a queue, type or task", {"201": "the pause (with a `warning` when no handler "
                                        "knows the name: a typo?)", **_BODY},
        body={"queue": "string", "type": "string", "task": "string", "for": "string",
              "reason": "string"})},
    "/api/pauses/resume": {"post": operation(
        "Lift a pause", {"200": "`{scope, name, resumed}`", **_BODY,
                         "404": "no such pause"},
        body={"queue": "string", "type": "string", "task": "string"})},
    "/api/blocks/unblock": {"post": operation(
        "Lift a block", {"200": "`{unblocked: true}`", **_BODY, "404": "no such block"},
        body={"id": "integer", "type": "string", "key": "string"})},
}
