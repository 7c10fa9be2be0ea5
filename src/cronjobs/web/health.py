"""The probes: `/health/live` (the process answers), `/health/ready` (it can serve: the
database answers) and `/health` (the full report). Public; the full report needs the token.

| route | 200 | 503 | touches |
|---|---|---|---|
| `/health/live` | always, when the process answers | never | nothing |
| `/health/ready` | the database and each critical check of your own pass | one does not | those |
| `/health` | `ok`, `warn` (also a broken check) | `fail`: a real outage | database, broker, ... |

`/health` and `/health/ready` each run at most one report at a time in this process and
serve it to every caller for `health_cache_seconds` (`SharedHealth`), on the health
engine's own small pool: probes never take the pages' connections.
"""

from __future__ import annotations

from flask import Blueprint, Flask, current_app, jsonify

from ..health import SharedHealth
from ..health.checks import database
from ..health.custom import critical_checks
from .auth import authenticated

bp = Blueprint("health", __name__)


@bp.get("/health/live")
def live():
    """Liveness: 200 `{"status": "ok"}` whenever this process answers; reads nothing, so a
    database or broker outage never restarts the web process."""
    return jsonify(status="ok"), 200


@bp.get("/health/ready")
def ready():
    """Readiness: 200 when the database answers and every critical check of your own
    passes (workers, broker, schedule and the other checks do not matter); 503 when one
    does not or broke. The token adds the checks."""
    report = current_app.extensions["cronjobs_ready"].report()
    bad = [c.status for c in report.checks if c.status not in ("ok", "warn")]
    status = bad[0] if bad else "ok"
    body = {"status": status}
    if authenticated(ask_hook=False):  # public: the `authorize` hook is never asked
        body["checks"] = [c.as_dict() for c in report.checks]
    return jsonify(body), 200 if status == "ok" else 503


@bp.get("/health")
def report():
    """`{"status": "ok|warn|fail"}` for anyone; the full report with the token. 503 only
    on `fail` (a broken check is `check_error` in the report, `warn` in the status)."""
    shared = current_app.extensions["cronjobs_health"].report()
    body = shared.as_dict() if authenticated(ask_hook=False) else {"status": shared.status}
    return jsonify(body), 503 if shared.status == "fail" else 200


def install(web: Flask) -> None:
    """Register the probes on `web` with their shared reports."""
    app = web.extensions["cronjobs_app"]
    ttl = app.settings.health.cache_seconds
    web.extensions["cronjobs_health"] = SharedHealth(app, ttl_seconds=ttl)
    web.extensions["cronjobs_ready"] = SharedHealth(
        app, [("database", database), *critical_checks(app)], ttl_seconds=ttl)
    web.register_blueprint(bp)

