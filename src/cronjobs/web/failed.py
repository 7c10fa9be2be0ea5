"""Failed page: failed rows grouped by type and fingerprint (`job.failures`: the error text
with numbers, ids, quoted values ... normalised), and the failed rows themselves (of
the page's type or group) with boxes to tick; retry or delete ticked rows, a group, or
every failed row (of the page's type), as a bulk operation that runs outside the request
(`web.operations`: confirmed first)."""

from __future__ import annotations

from flask import Blueprint, abort, render_template, request
from flask_babel import gettext as _

from .. import store
from ..actions import bulk
from ..job import failures
from ..status import Status
from .operations import group_selection, start_operation
from .scopes import requires
from .view import ROW_ID_MAX, cronjobs_app

bp = Blueprint("failed", __name__)
ROWS_PER_PAGE = 50


def _before() -> int | None:
    value = request.args.get("before", "").strip()
    if not value:
        return None
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= ROW_ID_MAX:
        abort(400, f"before must be a row id, got {value!r}")
    return int(value)


@bp.get("/failed")
def failed():
    """The groups, biggest first (the newest 5,000 failed rows are grouped by type and
    fingerprint: each with its pattern, count and one or two examples), the count of
    all failed rows (capped), the newest bulk operations, and a page of the failed rows of
    the page's `type` or `group` (a row id of the group), newest first (`before`: older).
    A group's count is its count among the newest 5,000 (its rows have no index of their
    own: the confirmation page counts them all)."""
    app = cronjobs_app()
    job_type = (request.args.get("type") or "").strip() or None
    group = (request.args.get("group") or "").strip() or None
    selection = group_selection(group, job_type) if group else None
    if selection is not None:
        job_type = selection.job_type
    with app.engine.connect() as conn:
        groups = failures.groups(conn, job_type)
        total = store.views.failed_total(conn, job_type)
        mark = failures.digest(selection.group) if selection else None
        rows = store.views.list_rows(conn, status=Status.FAILED,
                                     types=[job_type] if job_type else None,
                                     failure=(mark, selection.unmarked) if selection else None,
                                     before=_before(), limit=ROWS_PER_PAGE)
    if selection is not None:  # counted among the newest 5,000 (the groups); None: older
        total = next(((g["count"], False) for g in groups if (g["type"], g["fingerprint"]) == (
            selection.job_type, mark)), None)
    return render_template("failed.html", groups=groups, type=job_type, total=total,
                           group=group, group_pattern=selection.group if selection else None,
                           rows=rows, operations=bulk.recent(app, 5))


@bp.post("/failed/retry")
@requires("operate")
def retry_group():
    """Start a bulk retry of a group (`job`: one of its rows) or of every failed row (`all=1`,
    with an optional `type`) at once, and open its progress page.

    The start without the confirmation page, for scripts (with the token) and pages of
    earlier versions; the Failed page's own buttons confirm first (`/operations/confirm`).
    A retry of the same selection that is already running (in any process) refuses this
    one: 409, with that operation's progress.
    """
    if request.form.get("all") == "1":
        selection = group_selection("", (request.form.get("type") or "").strip() or None)
    elif not request.form.get("job", "").strip():
        abort(400, _("job must be a row id"))
    else:
        selection = group_selection(request.form.get("job", "").strip())
    return start_operation("retry", selection)
