"""Failed page: failed rows grouped by type and error; retry a group, or every failed row
(of the page's type), as a bulk operation that runs outside the request."""

from __future__ import annotations

from flask import Blueprint, abort, redirect, render_template, request, url_for
from flask_babel import gettext as _

from .. import bulk, store
from ..errors import OperationRunning
from ..status import Status
from .view import ROW_ID_MAX, cronjobs_app

bp = Blueprint("failed", __name__)


@bp.get("/failed")
def failed():
    """The groups, biggest first (the newest 5,000 failed rows are grouped), the count of
    all failed rows (capped) and the newest bulk operations."""
    app = cronjobs_app()
    job_type = (request.args.get("type") or "").strip() or None
    with app.engine.connect() as conn:
        groups = store.views.failed_groups(conn, job_type)
        total = store.views.failed_total(conn, job_type)
    return render_template("failed.html", groups=groups, type=job_type, total=total,
                           operations=bulk.recent(app, 5))


def _selection() -> bulk.Selection:
    """The rows of the form: `job` names a group by one of its rows (form encoding turns
    newlines into CRLF, so the error text itself would no longer match the stored text);
    `all=1` (with an optional `type`) is every failed row (of that type)."""
    if request.form.get("all") == "1":
        job_type = (request.form.get("type") or "").strip() or None
        return bulk.Selection(Status.FAILED, job_type)
    try:
        job_id = int(request.form.get("job", ""))
    except ValueError:
        abort(400, _("job must be a row id"))
    if not 1 <= job_id <= ROW_ID_MAX:
        abort(404, f"no failed job with id {job_id}")
    with cronjobs_app().engine.connect() as conn:
        key = store.views.group_of(conn, job_id)
    if key is None:
        abort(404, f"no failed job with id {job_id}")
    return bulk.Selection(Status.FAILED, key[0], key[1])


@bp.post("/failed/retry")
def retry_group():
    """Start a bulk retry of a group (or of every failed row) and open its progress page.

    The snapshot of ids is taken here; the batches run in a background thread. A retry of
    the same selection that is already running (in any process) refuses this one: 409,
    with that operation's progress.
    """
    app = cronjobs_app()
    try:
        started = bulk.start(app, "retry", _selection(), who="dashboard")
    except OperationRunning as exc:
        return render_template("operation.html", op=exc.operation, refused=True), 409
    if started.operation["status"] == "running":
        bulk.run_in_background(app, started)
    return redirect(url_for("operations.operation", operation_id=started.operation["id"]), 303)
