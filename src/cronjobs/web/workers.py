"""Workers page: live workers from their heartbeats, and queues nobody consumes."""

from __future__ import annotations

from flask import Blueprint, render_template

from .. import store
from ..heartbeat import LIVE_SECONDS
from ..store import stats
from .view import cronjobs_app

bp = Blueprint("workers", __name__)


@bp.get("/workers")
def workers():
    """Live and dead workers, queues with no live worker, due rows per queue.

    Reads the heartbeats and the due rows per queue (capped, on the claim index); never
    every pending row.
    """
    app = cronjobs_app()
    with app.engine.connect() as conn:
        seen = stats.heartbeats(conn, LIVE_SECONDS)
        due = store.queues.due_by_queue(conn, app.clock.now())
    live = [w for w in seen if w["live"]]
    served = {q for w in live for q in w["queues"].split(",") if q}
    orphans = sorted(q for q in due if q not in served)
    return render_template("workers.html", live=live, dead=[w for w in seen if not w["live"]],
                           unserved=[q for q in app.queues() if q not in served],
                           orphans=orphans, due=due, now=app.clock.now())
