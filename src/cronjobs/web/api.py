"""JSON routes and `/metrics` (the probes are in `health.py`)."""

from __future__ import annotations

from datetime import datetime

from flask import Blueprint, Response, abort, current_app, jsonify, request, url_for

from .. import limits, store
from ..errors import HandlerNotFound
from ..schedule import pingin
from ..schedule.taskrows import task_rows
from .fields import FIELDS
from .jobs import queue_filters
from .openapi import operation
from .scopes import ping_refusal, requires
from .view import cronjobs_app, head_bytes

bp = Blueprint("api", __name__)


def _clean(value):
    if isinstance(value, datetime):
        return value.isoformat() + "Z"
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


@bp.get("/api/tasks")
def tasks():
    """Every task: the same rows as the Tasks page and `cronjobs tasks`."""
    return jsonify([_clean(r.as_dict()) for r in task_rows(cronjobs_app())])


@bp.get("/api/jobs")
def jobs():
    """A page of rows (the Queue page's filters and keyset: `before`, `after`, `limit`);
    housekeeping rows are included unless `housekeeping=0`."""
    f = queue_filters(hide_by_default=False)
    with cronjobs_app().engine.connect() as conn:
        page = store.views.list_rows(conn, status=f["status"], types=f["types"],
                                     parent_id=f["parent"], queue=f["queue"],
                                     title=f["title"],
                                     before=f["before"], after=f["after"], limit=f["limit"],
                                     hide=f["hide"])
    response = jsonify(_clean(page.rows))
    if page.older is not None:
        response.headers["X-Next-Before"] = str(page.older)
    return response


@bp.get("/api/jobs/<id:job_id>")
def job(job_id: int):
    """One whole row (payload and result as stored JSON text; `traceback`: the last
    failure's, with file names and line numbers; `fingerprint`: its Failed-page group).

    A payload, result, error, traceback or log larger than `API_TEXT_MAX_BYTES` (1,000,000 bytes,
    more than cronjobs itself ever writes) comes cut to that size and is listed under
    `"cut"`: `{column: {"bytes": whole size, "download": URL of the raw value}}`.
    """
    with cronjobs_app().engine.connect() as conn:
        row = store.fields.job_heads(conn, job_id, limits.API_TEXT_MAX_BYTES)
    if row is None:
        abort(404, f"no job with id {job_id}")
    cut = {}
    for name, (column, _suffix, _mime) in FIELDS.items():
        size = row.pop(column + "_bytes")
        if size is not None and size > limits.API_TEXT_MAX_BYTES:
            row[column] = head_bytes(row[column], limits.API_TEXT_MAX_BYTES)
            cut[column] = {"bytes": size, "download": url_for("fields.raw", job_id=job_id,
                                                              field=name)}
    if cut:
        row["cut"] = cut
    return jsonify(_clean(row))


@bp.post("/api/ping/<task>")
@bp.post("/api/ping/<task>/<any(start, fail):kind>")
@requires("dispatch")
def ping(task: str, kind: str = "success"):
    """Pings in (`schedule.pingin.ping`): record a run of `task` that runs elsewhere:
    `/start` opens a running row, no suffix (success) or `/fail` ends it (or writes a
    finished one). The optional body is the run's output or error text (its first
    `PING_TEXT_MAX_BYTES` kept). Answers `{"task", "id", "status"}`; 404 for a task
    neither registered nor declared as `[tasks.<task>]` with a frequency; 403 for a
    registered task (it runs here) unless the token has `operate` (`ping_refusal`)."""
    refused = ping_refusal(cronjobs_app(), task)
    if refused:
        return jsonify(error=refused), 403
    body = request.stream.read(pingin.PING_TEXT_MAX_BYTES + 1)
    text = body.decode("utf-8", "replace") if body else None
    try:
        run = pingin.ping(cronjobs_app(), task, kind, text)
    except HandlerNotFound as exc:
        abort(404, str(exc))
    return jsonify({"task": task, "id": run.id, "status": run.status})


@bp.get("/metrics")
def metrics():
    """Prometheus text format (behind the token unless `metrics_public`)."""
    # lazy: prometheus_client is loaded by the first scrape, not by every dashboard
    from prometheus_client import CONTENT_TYPE_LATEST

    from .metrics import Metrics

    collector = current_app.extensions.get("cronjobs_metrics")
    if collector is None:
        collector = current_app.extensions["cronjobs_metrics"] = Metrics(cronjobs_app())
    return Response(collector.render(), mimetype=CONTENT_TYPE_LATEST)


OPENAPI: dict = {
    "/api/tasks": {"get": operation("Every task", {"200": "the rows of the Tasks page"})},
    "/api/jobs": {"get": operation(
        "A page of rows, newest first", {"200": "rows; header `X-Next-Before`: the next page",
                                         "400": "a bad filter"},
        query={"status": "string", "type": "string", "parent": "integer", "queue": "string",
               "title": "string", "before": "integer", "after": "integer", "limit": "integer",
               "housekeeping": "string"})},
    "/api/jobs/{job_id}": {"get": operation(
        "One whole row", {"200": "the row (large texts cut, listed under `cut`)",
                          "404": "no such row"})},
    "/api/ping/{task}": {"post": operation(
        "Ping in: a run of a task that runs elsewhere succeeded", {
            "200": "`{task, id, status}`", "404": "unknown task"},
        description="The optional body (plain text) is the run's output.")},
    "/api/ping/{task}/{kind}": {"post": operation(
        "Ping in: a run started (`start`) or failed (`fail`)", {
            "200": "`{task, id, status}`", "404": "unknown task or kind"},
        description="The optional body (plain text) is the run's output or error.")},
}
