"""What every page shares: the App (read through the dashboard's own engine), template
filters, security headers, error pages (a database that cannot answer now: 503)."""

from __future__ import annotations

import json
from datetime import datetime

from flask import Flask, current_app, render_template, request
from flask_babel import format_decimal, get_locale
from flask_babel import gettext as _
from markupsafe import Markup
from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

from ..app import App
from ..db import classify, driver_message
from ..errors import CronjobsError, DatabaseRefused, StoreError

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")


def web_engine(app: App) -> Engine:
    """The dashboard's engine, apart from the worker's and the health checks': 5 + 5
    connections; waiting for a free one, connecting, a statement and a lock wait each end
    after `dashboard_db_timeout_seconds` (then the page answers 503)."""
    timeout = app.settings.dashboard_db_timeout_seconds
    return app.side_engine("web", pool_size=5, pool_timeout_seconds=timeout,
                           statement_timeout_seconds=timeout)


def cronjobs_app() -> App:
    """The App the dashboard shows, reading and writing through `web_engine`."""
    app = current_app.extensions["cronjobs_app"]
    return app.using(web_engine(app))


def fmt_time(value: datetime | None) -> str:
    """`YYYY-MM-DD HH:MM:SS` (UTC), or an empty string."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else ""


def fmt_count(value) -> str:  # noqa: ANN001
    """A count, or a capped count `(n, capped)` as `10,000+` (in the page's language)."""
    if isinstance(value, tuple):
        n, capped = value
        return format_decimal(n) + ("+" if capped else "")
    return format_decimal(value or 0)


def pretty_json(text: str | None) -> str:
    """Stored JSON text indented for reading; integers stay exact (no float round trip)."""
    if text in (None, ""):
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def duration(row: dict) -> str:
    """How long the last run took, from started_at to finished_at (seconds)."""
    start, end = row.get("started_at"), row.get("finished_at")
    if not start or not end or end < start:
        return ""
    return f"{(end - start).total_seconds():.3f} s"


def render_summary(cls: type | None, result_text: str | None) -> dict:
    """Call `cls.render_summary(result)` for the Results tab, safely.

    Returns:
        `{"html": Markup}` (a `Markup` is trusted HTML; a `str` is escaped and shown in a
        <pre>), or `{"error": "ExceptionType: message"}` when it raised, or
        `{"missing": reason}`.
    """
    if cls is None:
        return {"missing": "handler not installed"}
    if not result_text:
        return {"missing": "no result"}
    try:
        result = json.loads(result_text)
        out = cls.render_summary(result)
    except Exception as exc:  # the handler's bug must not break the page
        return {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    if isinstance(out, Markup):
        return {"html": out}
    return {"html": Markup("<pre class=\"summary-text\">{}</pre>").format(str(out))}


def _security_headers(response):  # noqa: ANN001, ANN202
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    if request.endpoint != "static":
        response.headers["Cache-Control"] = "no-store"
    return response


def _http_error(exc: HTTPException):  # noqa: ANN202
    if request.path.startswith("/api/"):
        return {"error": exc.description}, exc.code
    return render_template("error.html", code=exc.code, message=exc.description), exc.code


def _our_error(exc: CronjobsError):  # noqa: ANN202
    return render_template("error.html", code=400, message=str(exc)), 400


def _database_error(exc: Exception):  # noqa: ANN202
    """503 (with Retry-After) when the database cannot answer now: unreachable, no free
    connection within the timeout, a lock held too long, a statement past its time limit.
    500 when it refused a statement (a schema or server problem, not the request's)."""
    refused = isinstance(exc, DatabaseRefused) or (
        not isinstance(exc, StoreError) and classify(exc) == "refused")
    detail = str(exc) if isinstance(exc, StoreError) else driver_message(exc)
    code = 500 if refused else 503
    message = detail if refused else _("The database did not answer in time; try again in "
                                       "a moment.") + f" ({detail})"
    headers = {} if refused else {"Retry-After": "5"}
    if request.path.startswith(("/api/", "/metrics", "/health")) or (
            request.accept_mimetypes.best == "application/json"):
        return {"error": message}, code, headers
    return render_template("error.html", code=code, message=message), code, headers


def install(web: Flask) -> None:
    """Register filters, headers and error pages on `web`."""
    web.jinja_env.filters.update(time=fmt_time, count=fmt_count, pretty_json=pretty_json,
                                 duration=duration)
    web.context_processor(lambda: {"get_locale": get_locale})
    web.after_request(_security_headers)
    web.register_error_handler(HTTPException, _http_error)
    web.register_error_handler(CronjobsError, _our_error)
    for database_error in (StoreError, sa_exc.DBAPIError, sa_exc.TimeoutError):
        web.register_error_handler(database_error, _database_error)
