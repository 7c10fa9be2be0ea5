"""Bulk operation pages: progress of one operation (refreshing while it runs), Resume."""

from __future__ import annotations

from flask import Blueprint, abort, redirect, render_template, url_for

from .. import bulk
from ..errors import OperationRunning
from .view import cronjobs_app

bp = Blueprint("operations", __name__)


@bp.get("/operations/<int:operation_id>")
def operation(operation_id: int):
    """Progress of operation `operation_id`; the page refreshes while it runs."""
    op = bulk.get(cronjobs_app(), operation_id)
    if op is None:
        abort(404, f"no operation with id {operation_id}")
    return render_template("operation.html", op=op, refused=False,
                           refresh=op["status"] == "running" and not op["stalled"])


@bp.post("/operations/<int:operation_id>/resume")
def resume(operation_id: int):
    """Take over a stalled operation and run its batches left in the background."""
    app = cronjobs_app()
    if bulk.get(app, operation_id) is None:
        abort(404, f"no operation with id {operation_id}")
    try:
        started = bulk.resume(app, operation_id)
    except OperationRunning as exc:
        return render_template("operation.html", op=exc.operation, refused=True), 409
    bulk.run_in_background(app, started)
    return redirect(url_for("operations.operation", operation_id=operation_id), 303)
