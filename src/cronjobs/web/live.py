"""The small JSON routes the pages poll to update themselves without a reload
(`static/live.js`): each answers the numbers, plus `html`, the page's live part rendered
again by the same template (so the words, times and escaping are the page's own).

Behind the same token or session as the pages; a page without JavaScript still works (the
Queue page has a Refresh link, the Job page reloads itself while its row runs).
"""

from __future__ import annotations

from datetime import datetime

from flask import Blueprint, jsonify, render_template

from ..store.models import STATUSES
from .jobs import JOB_POLL_SECONDS, job_page, queue_filters, queue_links, queue_page
from .openapi import operation

bp = Blueprint("live", __name__)


def _iso(value):
    return value.isoformat() + "Z" if isinstance(value, datetime) else value


@bp.get("/api/queue")
def queue():
    """The Queue page's rows and counts for the same filters (`status`, `task`, `type`,
    `parent`, `queue`, `title`, `housekeeping`, `before`, `after`, `limit`).

    Returns:
        `{"rows": [{id, type, status, attempts, max_attempts, scheduled_at, finished_at,
        title}], "counts": {status: [n, capped]}, "html"}`; `counts` are of the rows of
        the `task`, `type`, `parent` and `queue` filters (not the title's).
    """
    f = queue_filters()
    data = queue_page(f)
    rows = [{k: _iso(r[k]) for k in ("id", "type", "status", "attempts", "max_attempts",
                                      "scheduled_at", "finished_at", "title")}
            for r in data["page"].rows]
    html = render_template("_queue_live.html", f=f, statuses=STATUSES, **queue_links(f),
                           **data)
    return jsonify({"rows": rows, "counts": data["counts"], "html": html})


@bp.get("/api/jobs/<id:job_id>/live")
def job(job_id: int):
    """Row `job_id` as its page shows it now.

    Returns:
        `{"id", "status", "attempts", "children": {status: n}, "done", "html"}`; `done` is
        True once neither the row nor a child is pending or running (the page stops
        polling).
    """
    data = job_page(job_id)
    row = data["row"]
    return jsonify({"id": row["id"], "status": row["status"], "attempts": row["attempts"],
                    "children": data["child_counts"], "done": not data["live"],
                    "poll_seconds": JOB_POLL_SECONDS,
                    "html": render_template("_job_live.html", **data)})


OPENAPI: dict = {
    "/api/queue": {"get": operation("What the Queue page polls",
                                    {"200": "rows, counts and HTML", "400": "a bad filter"})},
    "/api/jobs/{job_id}/live": {"get": operation(
        "What the Job page polls", {"200": "the row's live part", "404": "no such row"})},
}
