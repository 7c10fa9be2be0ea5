"""What every page shares: the App (read through the dashboard's own engine), template
filters, security headers, error pages (a database that cannot answer now: 503)."""

from __future__ import annotations

import json
import re
from datetime import datetime

from flask import Flask, current_app, g, render_template, request, url_for
from flask_babel import format_decimal, get_locale
from flask_babel import gettext as _
from markupsafe import Markup
from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException
from werkzeug.routing import IntegerConverter

from .. import limits
from ..app import App
from ..errors import CronjobsError, DatabaseRefused, JobNotFound, StoreError, names_missing_table
from ..store.db import classify, driver_message

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")


def web_engine(app: App) -> Engine:
    """The dashboard's engine, apart from the worker's and the health checks': 5 + 5
    connections; waiting for a free one, connecting, a statement and a lock wait each end
    after `dashboard_db_timeout_seconds` (then the page answers 503)."""
    timeout = app.settings.dashboard.db_timeout_seconds
    return app.side_engine("web", pool_size=5, pool_timeout_seconds=timeout,
                           statement_timeout_seconds=timeout)


_SURROGATES = re.compile("[\ud800-\udfff]")
ROW_ID_MAX = 2**63 - 1  # BIGINT


class RowIdConverter(IntegerConverter):
    """`<id:name>`: a row id, 1 to 2^63 - 1 in ASCII digits; anything else (negative, too
    big for BIGINT/SQLite INTEGER) does not match the route, so it answers 404."""

    regex = r"[0-9]{1,19}"

    def __init__(self, url_map, *_args, **_kwargs) -> None:
        super().__init__(url_map, min=1, max=ROW_ID_MAX)


def valid_text(value):
    """`value` with lone surrogates (text decoded with `surrogateescape`, JSON `\\udcXX`
    escapes) replaced by U+FFFD, so every page encodes as UTF-8; a `Markup` stays one.
    Jinja calls it on every `{{ ... }}` output (`finalize`); other values pass unchanged."""
    if not isinstance(value, str) or value.isascii() or not _SURROGATES.search(value):
        return value
    cleaned = _SURROGATES.sub("\ufffd", value)
    return Markup(cleaned) if isinstance(value, Markup) else cleaned


def lang_url(lang: str | None = None) -> str:
    """This page in language `lang` (None: the page's), with its path and query (its tab,
    filters and page); the Overview for an error or a POST."""
    rule = request.url_rule
    if request.endpoint and rule is not None and "GET" in (rule.methods or ()):
        args = {key: values for key, values in request.args.lists() if key != "lang"}
        return url_for(request.endpoint, **{**args, **(request.view_args or {})}, lang=lang)
    return url_for("overview.index", lang=lang)


def cronjobs_app() -> App:
    """The App the dashboard shows, reading and writing through `web_engine`."""
    app = current_app.extensions["cronjobs_app"]
    return app.using(web_engine(app))


def handler_registry(app: App):
    """The handler registry of `app` (`tasks()`, `task_types(task)`, `resolve_handler(type)`,
    `registered_handlers()`): the one place the dashboard reaches it, so a move of the
    registry on the App is a change of this line."""
    return app.handlers


def page_now() -> datetime:
    """The App clock's now (naive UTC), read once per request: every relative time of a
    page is measured from the same instant."""
    if "now" not in g:
        g.now = cronjobs_app().clock.now()
    return g.now


def fmt_time(value: datetime | None) -> str:
    """`YYYY-MM-DD HH:MM:SS` (UTC), or an empty string."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else ""


def fmt_count(value) -> str:
    """A count, or a capped count `(n, capped)` as `10,000+` (in the page's language)."""
    if isinstance(value, tuple):
        n, capped = value
        return format_decimal(n) + ("+" if capped else "")
    return format_decimal(value or 0)


def pretty_json(text: str | None) -> str:
    """Stored JSON text indented for reading; integers stay exact (no float round trip).
    Text that is not JSON, or nested too deep to parse, is returned as it is."""
    if text in (None, ""):
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


def duration(row: dict) -> str:
    """How long the last run took, from started_at to finished_at (seconds)."""
    start, end = row.get("started_at"), row.get("finished_at")
    if not start or not end or end < start:
        return ""
    return f"{(end - start).total_seconds():.3f} s"


def attempts(row: dict) -> str:
    """`attempts/max`: a row dispatched without max attempts shows its handler's
    MAX_ATTEMPTS (set when a worker claims it), or `—` when no handler here knows it."""
    most = row.get("max_attempts")
    if most is None:
        cls = cronjobs_app().resolve(row["type"])
        most = cls.MAX_ATTEMPTS if cls is not None else "—"
    return f"{row.get('attempts', 0)}/{most}"


def head_bytes(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` whose UTF-8 form has at most `max_bytes` bytes
    (never half a character)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", "ignore")


def render_summary(cls: type | None, result_text: str | None) -> dict:
    """Call `cls.render_summary(result)` for the Results tab, safely.

    Returns:
        `{"html": Markup}` (a `Markup` is trusted HTML; a `str` is escaped and shown in a
        <pre>, its first `DISPLAY_MAX_BYTES` only), or `{"error": "ExceptionType:
        message"}` when it raised or returned more than `SUMMARY_HTML_MAX_CHARS` of HTML,
        or `{"missing": reason}`.
    """
    if cls is None:
        return {"missing": "handler not installed"}
    if not result_text:
        return {"missing": "no result"}
    try:
        result = json.loads(result_text)
    except (ValueError, RecursionError) as exc:  # nested too deep for the parser
        return {"error": f"the result cannot be read as JSON: {type(exc).__name__}"}
    try:
        out = cls.render_summary(result)
    except Exception as exc:  # the handler's bug must not break the page
        return {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    if isinstance(out, Markup):
        if len(out) > limits.SUMMARY_HTML_MAX_CHARS:
            return {"error": f"render_summary returned {len(out):,} characters of HTML; the "
                             f"page shows at most {limits.SUMMARY_HTML_MAX_CHARS:,}"}
        return {"html": out}
    text = str(out)
    if len(text) > limits.DISPLAY_MAX_BYTES // 4:
        shown = head_bytes(text, limits.DISPLAY_MAX_BYTES)
        text = shown if shown == text else shown + " ... [cut]"
    return {"html": Markup("<pre class=\"summary-text\">{}</pre>").format(text)}


def _security_headers(response):
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    if request.endpoint != "static":
        response.headers["Cache-Control"] = "no-store"
    return response


def _http_error(exc: HTTPException):
    if request.path.startswith("/api/"):
        return {"error": exc.description}, exc.code
    return render_template("error.html", code=exc.code, message=exc.description), exc.code


def _our_error(exc: CronjobsError):
    code = 404 if isinstance(exc, JobNotFound) else 400
    return render_template("error.html", code=code, message=str(exc)), code


def _database_error(exc: Exception):
    """503 (with Retry-After) when the database cannot answer now: unreachable, no free
    connection within the timeout, a lock held too long, a statement past its time limit.
    500 when it refused a statement (a schema or server problem, not the request's)."""
    detail = str(exc) if isinstance(exc, StoreError) else driver_message(exc)
    if names_missing_table(detail) or names_missing_table(str(exc)):
        return _not_migrated()
    refused = isinstance(exc, DatabaseRefused) or (
        not isinstance(exc, StoreError) and classify(exc) == "refused")
    code = 500 if refused else 503
    message = detail if refused else _("The database did not answer in time; try again in "
                                       "a moment.") + f" ({detail})"
    headers = {} if refused else {"Retry-After": "5"}
    if request.path.startswith(("/api/", "/metrics", "/health")) or (
            request.accept_mimetypes.best == "application/json"):
        return {"error": message}, code, headers
    return render_template("error.html", code=code, message=message), code, headers


NOT_MIGRATED = "the database is not migrated: run `cronjobs migrate`"


def _not_migrated():
    """503, one line: the database has no cronjobs tables (never migrated); JSON for the
    JSON routes, else the error page."""
    if request.path.startswith(("/api/", "/metrics", "/health")) or (
            request.accept_mimetypes.best == "application/json"):
        return {"error": NOT_MIGRATED}, 503
    return render_template("error.html", code=503, message=NOT_MIGRATED), 503


def install(web: Flask) -> None:
    """Register filters, headers and error pages on `web`."""
    web.url_map.converters["id"] = RowIdConverter  # before any route is added
    web.jinja_env.finalize = valid_text
    web.jinja_env.filters.update(time=fmt_time, count=fmt_count, pretty_json=pretty_json,
                                 duration=duration, attempts=attempts)
    web.jinja_env.globals.update(lang_url=lang_url, display_max_bytes=limits.DISPLAY_MAX_BYTES)
    web.context_processor(lambda: {"get_locale": get_locale})
    web.after_request(_security_headers)
    web.register_error_handler(HTTPException, _http_error)
    web.register_error_handler(CronjobsError, _our_error)
    for database_error in (StoreError, sa_exc.DBAPIError, sa_exc.TimeoutError):
        web.register_error_handler(database_error, _database_error)
