"""Tasks page: every task with its schedule state, kill switch and Run now button."""

from __future__ import annotations

from flask import Blueprint, abort, redirect, render_template, request, url_for
from flask_babel import gettext as _

from ..errors import TaskRefused
from ..manual import new_request_token, run_now
from ..scheduler import set_enabled
from ..taskrows import task_rows
from .view import cronjobs_app

bp = Blueprint("tasks", __name__)


def _page(error: str | None = None, code: int = 200):
    rows = task_rows(cronjobs_app())
    return render_template("tasks.html", rows=rows, error=error,
                           tokens={r.task: new_request_token() for r in rows}), code


@bp.get("/")
def index():
    """The Tasks page (the dashboard's home)."""
    return _page()


@bp.post("/tasks/<task>/run")
def run(task: str):
    """Run now: one row per request token (a double click is one row), then the row's page."""
    app = cronjobs_app()
    if task not in app.handlers.tasks():
        abort(404, f"unknown task {task!r}")
    try:
        started = run_now(task, request_token=request.form.get("request_token") or None,
                          again=True, app=app)
    except TaskRefused as exc:
        return _page(_("Run now refused: %(reason)s", reason=str(exc)), 409)
    return redirect(url_for("jobs.job", job_id=started.id), 303)


@bp.post("/tasks/<task>/enabled")
def enabled(task: str):
    """The kill switch: form field `enabled` = `1` (on) or `0` (off)."""
    app = cronjobs_app()
    if task not in app.handlers.tasks():
        abort(404, f"unknown task {task!r}")
    value = request.form.get("enabled")
    if value not in ("0", "1"):
        abort(400, f"enabled must be 0 or 1, got {value!r}")
    set_enabled(task, value == "1", app=app)
    return redirect(url_for("tasks.index"), 303)
