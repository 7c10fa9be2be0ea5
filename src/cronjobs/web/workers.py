"""Workers page, the busy view: the jobs running now (worker, slot, elapsed time, Stop),
each worker's busy / total slots from its heartbeat, queues nobody consumes; it updates
itself (`/api/workers`). Stop asks for a confirmation (`GET /jobs/ID/stop`) and posts
(`POST /jobs/ID/stop`, CSRF): the same `operator.stop` as `cronjobs stop ID`.
"""

from __future__ import annotations

from flask import Blueprint, abort, jsonify, redirect, render_template, url_for

from .. import store
from ..actions import operator
from ..errors import JobStateError
from ..status import Status
from ..store import stats
from ..store.stops import RUNNING_SHOWN
from ..worker.heartbeat import LIVE_SECONDS, parse_job_slots
from .auth import who
from .openapi import operation
from .scopes import requires
from .view import cronjobs_app

bp = Blueprint("workers", __name__)

WORKERS_POLL_SECONDS = 2


def workers_page() -> dict:
    """What the Workers page shows, read now.

    Reads the heartbeats, the running rows (the `(status, id)` index, at most
    `RUNNING_SHOWN`) and the due rows per queue (capped, on the claim index); never every
    pending row.

    Returns:
        `{live, dead, unserved, orphans, due, running, running_capped, now}`: each live
        worker with `busy` (its running jobs at its last heartbeat) and `slots`; each
        running row with `slot` (None until its worker's next heartbeat names it).
    """
    app = cronjobs_app()
    now = app.clock.now()
    with app.engine.connect() as conn:
        seen = stats.heartbeats(conn, LIVE_SECONDS)
        due = store.queues.due_by_queue(conn, now)
        running = store.stops.running_rows(conn)
    live = [w for w in seen if w["live"]]
    slots_of = {w["id"]: parse_job_slots(w.get("job_slots")) for w in live}
    for worker in live:
        worker["busy"] = len(slots_of[worker["id"]])
    for row in running:
        row["slot"] = slots_of.get(row["worker_id"], {}).get(row["id"])
    served = {q for w in live for q in w["queues"].split(",") if q}
    return {"live": live, "dead": [w for w in seen if not w["live"]],
            "unserved": [q for q in app.queues() if q not in served],
            "orphans": sorted(q for q in due if q not in served), "due": due,
            "running": running, "running_capped": len(running) >= RUNNING_SHOWN, "now": now}


@bp.get("/workers")
def workers():
    """The busy view: running jobs with Stop, workers and their slots, due rows per queue."""
    return render_template("workers.html", poll_seconds=WORKERS_POLL_SECONDS, **workers_page())


@bp.get("/api/workers")
def api():
    """The Workers page's numbers, polled by the page.

    Returns:
        `{"running": [{id, type, worker_id, slot, started_at, stop_requested}],
        "workers": [{id, busy, slots, age_seconds}], "html"}`.
    """
    data = workers_page()
    iso = lambda v: None if v is None else v.isoformat() + "Z"  # noqa: E731
    running = [{"id": r["id"], "type": r["type"], "worker_id": r["worker_id"],
                "slot": r["slot"], "started_at": iso(r["started_at"]),
                "stop_requested": iso(r["stop_requested"])} for r in data["running"]]
    live = [{"id": w["id"], "busy": w["busy"], "slots": w.get("slots"),
             "age_seconds": round(w["age_seconds"], 1)} for w in data["live"]]
    return jsonify({"running": running, "workers": live,
                    "html": render_template("_workers_live.html", **data)})


@bp.get("/jobs/<id:job_id>/stop")
def confirm_stop(job_id: int):
    """The confirmation of a Stop: what runs where since when (409 when the row does not
    run: nothing to stop)."""
    app = cronjobs_app()
    with app.engine.connect() as conn:
        row = store.get_job(conn, job_id, ["id", "type", "title", "status", "attempts",
                                           "max_attempts", "worker_id", "started_at"])
    if row is None:
        abort(404, f"no job with id {job_id}")
    code = 200 if row["status"] == Status.RUNNING else 409
    return render_template("stop.html", row=row), code


@bp.post("/jobs/<id:job_id>/stop")
@requires("operate")
def stop(job_id: int):
    """Stop running row `job_id` (`operator.stop`); then its page, which shows the row
    end. A row that does not run: 409, nothing written."""
    try:
        operator.stop(cronjobs_app(), job_id, who=who())
    except JobStateError:
        return confirm_stop(job_id)[0], 409
    return redirect(url_for("jobs.job", job_id=job_id, stop="requested"), 303)


OPENAPI: dict = {
    "/api/workers": {"get": operation("Running jobs and live workers",
                                      {"200": "`{running, workers, html}`"})},
}
