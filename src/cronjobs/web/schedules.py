"""The Schedules page (`/schedules`, linked from the nav and the Tasks page): every schedule
entry (a handler's `SCHEDULES` and those stored at run time), with forms to add, edit,
pause, resume and remove stored ones (POST with the session's CSRF token, recorded as
`dashboard@<address>`); and the API (`GET`/`POST /api/schedules`, `POST
/api/schedules/<task:name>/pause|resume`, `DELETE /api/schedules/<task:name>`, with the
Bearer dashboard token). An entry added here is a task on the Tasks page at once."""

from __future__ import annotations

from flask import Blueprint, jsonify, redirect, render_template, request, url_for
from flask_babel import gettext as _

from .. import limits
from ..errors import HandlerNotFound, InvalidJob, ScheduleExists
from ..schedule import entries
from .auth import who
from .family import json_value
from .openapi import operation
from .scopes import requires
from .tasks import parse_payload
from .view import cronjobs_app, handler_registry

bp = Blueprint("schedules", __name__)


def _by(kind: str) -> str:
    return limits.by_address(kind, request.remote_addr, 64)


def _page(error: str | None = None, code: int = 200, form=None):
    app = cronjobs_app()
    return render_template("schedules.html", rows=entries.listing(app), error=error,
                           form=form or {}, tasks=sorted(handler_registry(app).tasks())), code


def _refused(exc: Exception, code: int = 400):
    return _page(_("Refused: %(reason)s", reason=str(exc)), code, request.form)


def _fields(form) -> dict:
    """`cron`, `timezone` (None when empty) and `payload` (a dict, or None) of a form.

    Raises:
        InvalidJob: a payload that is not a JSON object (naming the problem).
    """
    return {"cron": (form.get("cron") or "").strip(),
            "timezone": (form.get("timezone") or "").strip() or None,
            "payload": parse_payload(form.get("payload") or "")}


@bp.get("/schedules")
def index():
    """The Schedules page."""
    return _page()


@bp.post("/schedules/add")
@requires("admin")
def add():
    """Add an entry (form: `task`, `name`, `cron`, optional `timezone`, `payload`); a bad
    field is a 400 naming it and its value, and nothing is stored."""
    form = request.form
    try:
        entries.add(cronjobs_app(), (form.get("task") or "").strip(),
                    (form.get("name") or "").strip(), **_fields(form), by=_by(who()))
    except (InvalidJob, HandlerNotFound) as exc:
        return _refused(exc)
    return redirect(url_for("schedules.index"), 303)


@bp.post("/schedules/<spec>/edit")
@requires("admin")
def edit(spec: str):
    """Change a stored entry's `cron`, `timezone` and `payload` (form)."""
    try:
        entries.update(cronjobs_app(), spec, **_fields(request.form))
    except InvalidJob as exc:
        return _refused(exc)
    except HandlerNotFound as exc:
        return _refused(exc, 404)
    return redirect(url_for("schedules.index"), 303)


@bp.post("/schedules/<spec>/<action>")
@requires("admin")
def act(spec: str, action: str):
    """`pause`, `resume` or `remove` entry `spec` (`TASK:NAME`); 404 for an unknown entry."""
    try:
        _apply(spec, action, who(), ("pause", "resume", "remove"))
    except InvalidJob as exc:
        return _refused(exc)
    except HandlerNotFound as exc:
        return _refused(exc, 404)
    return redirect(url_for("schedules.index"), 303)


def _apply(spec: str, action: str, where: str, allowed: tuple[str, ...]) -> None:
    """Do `action` (one of `allowed`: pause, resume, remove) to entry `spec`, a pause
    recorded as by `where`'s operator.

    Raises:
        HandlerNotFound: an unknown entry, or an action not in `allowed`.
        InvalidJob: the entry refuses it (a code entry cannot be removed).
    """
    app = cronjobs_app()
    if action not in allowed:
        raise HandlerNotFound(f"no action {action[:20]!r} ({', '.join(allowed)})")
    if action == "pause":
        entries.pause(app, spec, by=_by(where))
    elif action == "resume":
        entries.resume(app, spec)
    else:
        entries.remove(app, spec)


def _api_error(exc: Exception, code: int):
    return jsonify(error=str(exc)), code


@bp.get("/api/schedules")
def api_list():
    """Every entry as JSON (`entries.listing`: task, name, cron, timezone, payload, source,
    paused, next_run_at in UTC)."""
    return jsonify(json_value(entries.listing(cronjobs_app())))


@bp.post("/api/schedules")
@requires("admin")
def api_add():
    """Add an entry from a JSON body `{"task", "name", "cron", "timezone"?, "payload"?}`:
    201 with the entry; 400 naming the bad field and value, 409 when an entry of that task
    and name exists (nothing stored)."""
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # nested deeper than the parser goes: not a body we take
        return _api_error(InvalidJob(f"the body is nested more than {limits.JSON_MAX_DEPTH} "
                                     f"levels deep; the limit is {limits.JSON_MAX_DEPTH}"), 400)
    if not isinstance(body, dict):
        return _api_error(InvalidJob("the body must be a JSON object with task, name and "
                                     "cron"), 400)
    unknown = sorted(set(body) - {"task", "name", "cron", "timezone", "payload"})
    if unknown:
        return _api_error(InvalidJob(f"unknown field {unknown[0][:40]!r} (task, name, cron, "
                                     f"timezone, payload)"), 400)
    try:
        entry = entries.add(cronjobs_app(), body.get("task"), body.get("name"),
                            body.get("cron"), timezone=body.get("timezone"),
                            payload=body.get("payload"), by=_by(who()))
    except ScheduleExists as exc:
        return _api_error(exc, 409)
    except (InvalidJob, HandlerNotFound) as exc:
        return _api_error(exc, 400)
    return jsonify(task=entry.entry_task, name=entry.name, cron=entry.cron,
                   timezone=entry.timezone, payload=entry.payload, source=entry.source), 201


@bp.post("/api/schedules/<spec>/<action>")
@requires("admin")
def api_act(spec: str, action: str):
    """`pause` or `resume` entry `spec`: `{"task", "paused"}`; 404 for an unknown one."""
    try:
        _apply(spec, action, who(), ("pause", "resume"))
    except InvalidJob as exc:
        return _api_error(exc, 400)
    except HandlerNotFound as exc:
        return _api_error(exc, 404)
    return jsonify(task=spec, paused=action == "pause")


@bp.delete("/api/schedules/<spec>")
def api_remove(spec: str):
    """Remove stored entry `spec` (its history stays): `{"task", "removed": true}`; 400
    for a code entry, 404 for an unknown one."""
    try:
        entries.remove(cronjobs_app(), spec)
    except InvalidJob as exc:
        return _api_error(exc, 400)
    except HandlerNotFound as exc:
        return _api_error(exc, 404)
    return jsonify(task=spec, removed=True)


OPENAPI: dict = {
    "/api/schedules": {
        "get": operation("Every schedule entry", {"200": "the entries"}),
        "post": operation("Add a schedule entry", {"201": "the entry", "400": "bad body",
                                                   "409": "an entry of that task and name "
                                                          "exists"},
                          body={"task": "string", "name": "string", "cron": "string",
                                "timezone": "string", "payload": "object"}),
    },
    "/api/schedules/{spec}/{action}": {"post": operation(
        "Pause or resume an entry (`action`: pause, resume)",
        {"200": "`{task, paused}`", "400": "bad action", "404": "no such entry"})},
    "/api/schedules/{spec}": {"delete": operation(
        "Remove a stored entry", {"200": "`{task, removed}`", "400": "a code entry",
                                  "404": "no such entry"})},
}
