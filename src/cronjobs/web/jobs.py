"""Queue page (filtered, keyset-paginated rows) and Job page (one row, Results tab, actions)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from flask import Blueprint, abort, current_app, redirect, render_template, request, url_for

from .. import limits, store
from ..actions import operator
from ..config.urls import hide_password
from ..errors import InvalidJob
from ..family import depends
from ..flow.state import pauses_holding, untaken, waits_for
from ..handler import stage_of
from ..status import Status
from ..store.models import STATUSES
from ..worker.heartbeat import LIVE_SECONDS
from .auth import who
from .fields import page_row
from .scopes import requires
from .view import cronjobs_app, handler_registry, render_summary

bp = Blueprint("jobs", __name__)


def _int_arg(name: str, low: int = 1, high: int = 2**63 - 1, args=None) -> int | None:
    value = (request.args if args is None else args).get(name, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        abort(400, f"{name} must be an integer, got {value!r}")
    if not low <= number <= high:
        abort(400, f"{name} must be between {low} and {high}, got {number}")
    return number


# The platform's own rows, hidden from the Queue page by default (a toggle shows them):
# the maintenance tasks of the built-in handlers (recover-stale every minute, cleanup,
# the health check) and the built-in uptime check (`http.uptime.discover` and its
# executes every minute; by default it checks the dashboard's own /health). About 4,300
# rows a day that would bury a user's own rows. A filter by task, type or parent shows
# them anyway: whoever asks for them sees them.
HOUSEKEEPING_TYPES = ("cronjobs.recoverstale.execute", "cronjobs.cleanup.execute",
                      "cronjobs.health.execute", "http.uptime.*")


def queue_filters(hide_by_default: bool = True, args=None) -> dict:
    """The Queue page's filters from the query string, validated (400 on bad input).

    Args:
        hide_by_default: leave out `HOUSEKEEPING_TYPES` unless `housekeeping=1` (the
            page); False: only with `housekeeping=0` (the JSON list `/api/jobs`).
        args: where to read them (a `MultiDict`; default: the query string; a bulk
            action's form carries the page's filters).

    Returns:
        `{status, type, task, types, parent, queue, title, before, after, limit,
        housekeeping, hide}`: `housekeeping` is True when those rows are shown, `hide` the
        types left out (empty when shown, or when a task, type or parent is asked for).
    """
    app = cronjobs_app()
    args = request.args if args is None else args
    status = args.get("status") or None
    if status is not None and status not in STATUSES:
        abort(400, f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    job_type = (args.get("type") or "").strip() or None
    task = (args.get("task") or "").strip() or None
    types = [job_type] if job_type else None
    if task:
        task_types = handler_registry(app).task_types(task)
        if not task_types:
            abort(400, f"unknown task {task!r}")
        types = [t for t in task_types if not job_type or t == job_type] or [job_type]
    title = (args.get("title") or "").strip() or None
    if title and len(title) > 255:
        abort(400, "title filter is longer than 255 characters")
    parent = _int_arg("parent", args=args)
    queue = (args.get("queue") or "").strip() or None
    if queue is not None:
        try:
            limits.check_queue(queue)
        except InvalidJob as exc:
            abort(400, str(exc))
    flag = args.get("housekeeping")
    shown = flag == "1" if hide_by_default else flag != "0"
    hide = () if shown or types or parent is not None else HOUSEKEEPING_TYPES
    return {"status": status, "type": job_type, "task": task, "types": types,
            "parent": parent, "queue": queue, "title": title,
            "before": _int_arg("before", args=args),
            "after": _int_arg("after", 0, args=args),
            "limit": _int_arg("limit", 1, 500, args=args) or 50,
            "housekeeping": shown, "hide": hide}


def queue_links(f: dict) -> dict:
    """Query arguments that keep the filters `f` in the Queue page's links:
    `{"keep": all but the page, "keep_base": every filter but the status (the status
    links), "live_args": the page's own arguments}`."""
    flag = "1" if f["housekeeping"] else None
    base = {"type": f["type"], "task": f["task"], "parent": f["parent"], "queue": f["queue"],
            "title": f["title"], "housekeeping": flag}
    keep = {"status": f["status"], **base}
    return {"keep": keep, "keep_base": base,
            "live_args": {**keep, "before": f["before"], "after": f["after"],
                          "limit": request.args.get("limit")}}


THROUGHPUT_SECONDS = 30  # the hour/day throughput is read at most this often per process
_lock = threading.Lock()


def throughput(conn, now: datetime) -> dict:
    """Execute rows done in the last hour and day, read at most every 30 s per dashboard
    (a rate over a day need not be live to the second, and at a million rows it is costly).

    Returns:
        `{"hour": (n, capped), "day": (n, capped), "at": when it was read}`.
    """
    with _lock:
        cached = current_app.extensions.get("cronjobs_throughput")
    if cached and abs((now - cached["at"]).total_seconds()) < THROUGHPUT_SECONDS:
        return cached
    fresh = {**store.views.throughput(conn, now), "at": now}
    with _lock:
        current_app.extensions["cronjobs_throughput"] = fresh
    return fresh


def queue_page(f: dict) -> dict:
    """The rows, counts and throughput of the Queue page for filters `f` (the counts per
    status are those of the rows of its type, task, parent and queue filters)."""
    app = cronjobs_app()
    with app.engine.connect() as conn:
        page = store.views.list_rows(conn, status=f["status"], types=f["types"],
                                     parent_id=f["parent"], queue=f["queue"],
                                     title=f["title"], before=f["before"], after=f["after"],
                                     limit=f["limit"], hide=f["hide"])
        discover = [r["id"] for r in page.rows if stage_of(r["type"]) == "discover"]
        children = store.views.children_counts(conn, discover)
        counts = store.views.count_by_status(conn, f["types"], parent_id=f["parent"],
                                             queue=f["queue"])
        speed = throughput(conn, app.clock.now())
        after = depends.waiting_for(conn, [r["id"] for r in page.rows
                                           if r["status"] == Status.WAITING])
    return {"page": page, "children": children, "counts": counts, "speed": speed,
            "waiting_for": after}


QUEUE_POLL_SECONDS = 3


@bp.get("/queue")
def queue():
    """Rows filtered by status, type, task, parent, queue and title text, newest first; the rows
    and counts update themselves (`/api/queue`)."""
    f = queue_filters()
    app = cronjobs_app()
    return render_template("queue.html", f=f, statuses=STATUSES,
                           tasks=sorted(handler_registry(app).tasks()),
                           poll_seconds=QUEUE_POLL_SECONDS, **queue_links(f), **queue_page(f))


JOB_POLL_SECONDS = 2
LIVE = (Status.PENDING, Status.WAITING, Status.RUNNING)


def job_page(job_id: int, tab: str = "overview") -> dict:
    """What the Job page shows of row `job_id` (404 when there is none).

    Returns:
        `{row, tab, summary, children, child_counts, handler_known, live, refresh, holds,
        waits, waiting_for}` (`waiting_for`: the unfinished dependencies of a `waiting`
        row): `live` while the row or one of its children is pending or running (the
        page polls), `refresh` while it runs or is due within a minute (the page reloads
        itself every 2 s when JavaScript is off), `holds` the pauses and blocks that hold
        a pending row now (`_holds`), `waits` the full limits a due row no pause or block
        holds waits for (`flowstate.waits_for`).
    """
    app = cronjobs_app()
    now = app.clock.now()
    with app.engine.connect() as conn:
        row = page_row(conn, job_id)
        if row is None:
            abort(404, f"no job with id {job_id}")
        kids = store.views.list_rows(conn, parent_id=job_id, limit=50)
        kid_counts = store.views.children_counts(conn, [job_id]).get(job_id, {})
        cls = app.resolve(row["type"])
        summary = _summary(conn, cls, row) if tab == "results" else None
        at = store.flow.flow_now(conn, app.clock)  # what the claims judge with
        holds = _holds(conn, row, at) if row["status"] == Status.PENDING else []
        after = depends.waiting_for(conn, [job_id]).get(job_id, []) \
            if row["status"] == Status.WAITING else []
        waits = [] if holds else waits_for(app, conn, row, at)
        if waits and untaken(row["queue"], [w for w in store.list_workers(
                conn, LIVE_SECONDS) if w["live"]]):
            waits = [{"kind": "worker", "queue": row["queue"]}]  # first of all, a worker
    busy_kids = any(kid_counts.get(s) for s in LIVE)
    refresh = row["status"] == Status.RUNNING or busy_kids or (
        row["status"] == Status.PENDING and (row["scheduled_at"] is None
                                        or row["scheduled_at"] <= now + timedelta(seconds=60)))
    return {"row": row, "tab": tab, "summary": summary, "children": kids,
            "child_counts": kid_counts, "handler_known": cls is not None,
            "live": row["status"] in LIVE or busy_kids, "refresh": refresh, "holds": holds,
            "waits": waits, "waiting_for": after}


def _holds(conn, row: dict, now) -> list[dict]:
    """The pauses (of the row's queue or type) and blocks (of its type: its limit key or
    the whole type) that hold pending `row` at `now` (naive UTC): a pause as
    `store.flow.list_pauses` gives it, with `"kind": "pause"`, or `{"kind": "block", "id",
    "key", "until"}` (`key` None: the whole type); `until` None: until resumed. Both
    tables hold a handful of rows."""
    holds = [dict(p, kind="pause") for p in pauses_holding(
        store.flow.list_pauses(conn, now), None, [row["type"]], [row["queue"]])]
    return holds + [{"kind": "block", "id": b["id"], "key": b["limit_key"], "until": b["until"]}
                    for b in store.flow.list_blocks(conn, now)
                    if b["type"] == row["type"] and b["limit_key"] in (None, row["limit_key"])]


@bp.get("/jobs/<id:job_id>")
def job(job_id: int):
    """One row: status, times, error, log, payload, result, children; `?tab=results` shows
    the handler's summary alone. While the row or a child is live the page updates itself
    (`/api/jobs/ID/live`).

    Each large text shows its first 64 KB only (`web.fields`), so the page stays small
    whatever the row holds.
    """
    tab = request.args.get("tab", "overview")
    if tab not in ("overview", "results"):
        abort(400, f"tab must be overview or results, got {tab!r}")
    data = job_page(job_id, tab)
    with cronjobs_app().engine.connect() as conn:  # its webhook deliveries, failed ones too
        webhooks = store.webhooks.deliveries_of(conn, job_id)
    for delivery in webhooks:  # a URL written before credentials were refused: hidden
        delivery["url"] = hide_password(delivery["url"])
    return render_template("job.html", poll_seconds=JOB_POLL_SECONDS, webhooks=webhooks,
                           **data)


def _summary(conn, cls: type | None, row: dict) -> dict:
    """The Results tab of `row`: its handler's summary of the whole result, read only
    when it is at most `SUMMARY_MAX_BYTES` (see `render_summary`)."""
    result = row["shown"].get("result")
    if cls is not None and result is not None and result.size > limits.SUMMARY_MAX_BYTES:
        return {"too_large": result.size, "limit": limits.SUMMARY_MAX_BYTES}
    text = None
    if cls is not None and result is not None:
        text = store.get_job(conn, row["id"], ["result_payload"])["result_payload"]
    return render_summary(cls, text)


@bp.post("/jobs/<id:job_id>/retry")
@requires("operate")
def retry(job_id: int):
    """Failed row back to pending (attempts reset); back to its page."""
    operator.retry(cronjobs_app(), job_id, who=who())
    return redirect(url_for("jobs.job", job_id=job_id), 303)


@bp.post("/jobs/<id:job_id>/cancel")
@requires("operate")
def cancel(job_id: int):
    """Pending row cancelled; back to its page."""
    operator.cancel(cronjobs_app(), job_id, who=who())
    return redirect(url_for("jobs.job", job_id=job_id), 303)
