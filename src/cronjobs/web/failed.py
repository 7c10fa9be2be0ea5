"""Failed page: failed rows grouped by type and error; retry one row or a whole group."""

from __future__ import annotations

from flask import Blueprint, abort, redirect, render_template, request, url_for
from flask_babel import gettext as _

from .. import operator, store
from .view import ROW_ID_MAX, cronjobs_app

bp = Blueprint("failed", __name__)


@bp.get("/failed")
def failed():  # noqa: ANN201
    """The groups, biggest first (the newest 5,000 failed rows are grouped)."""
    app = cronjobs_app()
    job_type = (request.args.get("type") or "").strip() or None
    with app.engine.connect() as conn:
        groups = store.views.failed_groups(conn, job_type)
    return render_template("failed.html", groups=groups, type=job_type,
                           done=request.args.get("retried", type=int))


@bp.post("/failed/retry")
def retry_group():  # noqa: ANN201
    """Retry every failed row of the group of row `job` (same type, same error key).

    The group is named by one of its rows, not by its error text: form encoding turns
    newlines into CRLF, which would no longer match the stored text.
    """
    try:
        job_id = int(request.form.get("job", ""))
    except ValueError:
        abort(400, _("job must be a row id"))
    if not 1 <= job_id <= ROW_ID_MAX:
        abort(404, f"no failed job with id {job_id}")
    app = cronjobs_app()
    with app.engine.connect() as conn:
        key = store.views.group_of(conn, job_id)
    if key is None:
        abort(404, f"no failed job with id {job_id}")
    n = operator.retry_failed(app, job_type=key[0], error=key[1], who="dashboard")
    return redirect(url_for("failed.failed", retried=n), 303)
