"""Workers page: live workers from their heartbeats, and queues nobody consumes."""

from __future__ import annotations

from flask import Blueprint, render_template

from .. import store
from ..heartbeat import view
from .view import cronjobs_app

bp = Blueprint("workers", __name__)


@bp.get("/workers")
def workers():
    """Live and dead workers, queues with no live worker, due rows per queue."""
    app = cronjobs_app()
    seen = view(app)
    with app.engine.connect() as conn:
        due = store.views.due_by_queue(conn, app.clock.now())
    served = {q for w in seen.live for q in w["queues"].split(",") if q}
    orphans = sorted(q for q in due if q not in served)
    return render_template("workers.html", live=seen.live, dead=seen.dead,
                           unserved=seen.unserved, orphans=orphans, due=due,
                           now=app.clock.now())
