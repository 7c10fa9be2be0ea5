"""The family page (`/jobs/ID/family`): a root row and every row under it as one run, with
a progress bar that updates itself (`/api/jobs/ID/family/live`, every 2 s), the failures
grouped, the callback rows, **Cancel family** (a confirmation page, then
`operator.cancel_family`) and **Retry failed** (a bulk retry of the family's failed rows,
through the bulk actions' confirmation page). `/api/jobs/ID/family` gives the family as
JSON (`Family.as_dict`); `POST /api/jobs/ID/family/cancel` cancels it.
"""

from __future__ import annotations

from datetime import datetime

from flask import Blueprint, abort, jsonify, redirect, render_template, request, url_for

from ..actions import operator
from ..family.view import Family, read_family
from .auth import who
from .openapi import operation
from .scopes import requires
from .view import cronjobs_app

bp = Blueprint("family", __name__)

FAMILY_POLL_SECONDS = 2


def family_of(job_id: int) -> Family:
    """The family of row `job_id` now (404 when there is no such row)."""
    app = cronjobs_app()
    with app.engine.connect() as conn:
        fam = read_family(conn, job_id, app.clock.now())
    if fam is None:
        abort(404, f"no job with id {job_id}")
    return fam


def bar(fam: Family) -> list[dict]:
    """The progress bar's segments: `[{status, n, percent}]` in bar order (completed,
    failed, cancelled, expired, running, pending), those with rows only."""
    total = fam.total or 1
    return [{"status": s, "n": n, "percent": round(100.0 * n / total, 2)}
            for s, n in fam.progress.items() if n]


def json_value(value):
    """`value` with its datetimes as ISO 8601 UTC text (`...Z`), in dicts and lists too."""
    if isinstance(value, datetime):
        return value.isoformat() + "Z"
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value


@bp.get("/jobs/<id:job_id>/family")
def page(job_id: int):
    """The family of row `job_id` (its root's when it is a row under one)."""
    fam = family_of(job_id)
    if fam.root_id != job_id:
        return redirect(url_for("family.page", job_id=fam.root_id), 303)
    return render_template("family.html", fam=fam, bar=bar(fam),
                           poll_seconds=FAMILY_POLL_SECONDS,
                           cancelled=request.args.get("cancelled"))


@bp.get("/api/jobs/<id:job_id>/family")
def api(job_id: int):
    """The family of row `job_id` as JSON (`Family.as_dict`: counts, progress, reasons,
    failures grouped, times, duration, rate, ETA, completions, callback rows); 404 for an
    unknown id."""
    return jsonify(json_value(family_of(job_id).as_dict()))


@bp.post("/api/jobs/<id:job_id>/family/cancel")
@requires("operate")
def api_cancel(job_id: int):
    """Cancel the family of row `job_id` (`operator.cancel_family`): `{"root", "cancelled",
    "stopping"}`; 404 for an unknown id. A Bearer request needs no CSRF token."""
    family_of(job_id)
    return jsonify(operator.cancel_family(cronjobs_app(), job_id, who=who()))


@bp.get("/api/jobs/<id:job_id>/family/live")
def live(job_id: int):
    """The family page's live part: `{"root_id", "progress", "done", "html"}`; `done` once
    the family is complete (the page stops polling)."""
    fam = family_of(job_id)
    return jsonify({"root_id": fam.root_id, "progress": fam.progress, "done": fam.complete,
                    "html": render_template("_family_live.html", fam=fam, bar=bar(fam))})


@bp.get("/jobs/<id:job_id>/family/cancel")
def confirm_cancel(job_id: int):
    """The confirmation of Cancel family: how many rows are pending and running."""
    return render_template("family_cancel.html", fam=family_of(job_id))


@bp.post("/jobs/<id:job_id>/family/cancel")
@requires("operate")
def cancel(job_id: int):
    """Cancel the family of row `job_id` (`operator.cancel_family`); then its page."""
    fam = family_of(job_id)
    done = operator.cancel_family(cronjobs_app(), fam.root_id, who=who())
    return redirect(url_for("family.page", job_id=fam.root_id,
                            cancelled=done["cancelled"] + done["stopping"]), 303)


OPENAPI: dict = {
    "/api/jobs/{job_id}/family": {"get": operation(
        "A row's family: its root, counts and rows", {"200": "the family",
                                                     "404": "no such row"})},
    "/api/jobs/{job_id}/family/cancel": {"post": operation(
        "Cancel a row's family", {"200": "`{root, cancelled, stopping}`",
                                  "404": "no such row"})},
    "/api/jobs/{job_id}/family/live": {"get": operation(
        "What the family page polls", {"200": "counts and HTML", "404": "no such row"})},
}
