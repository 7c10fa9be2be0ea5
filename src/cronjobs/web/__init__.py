"""The automation dashboard: a Flask app with one blueprint per page group.

Pages: Overview (`/`), Tasks (`/tasks`), a task (`/tasks/<name>`), Queue (`/queue`), Job
(`/jobs/<id>`, its texts whole at `/jobs/<id>/raw/<field>`), a family (`/jobs/<id>/family`,
its JSON `/api/jobs/<id>/family`: `family.py`), Workers (`/workers`, the busy
view; Stop at `/jobs/<id>/stop`), Failed (`/failed`), bulk operations (`/operations/<id>`),
Pauses & blocks (`/flow`); JSON: `/api/tasks`, `/api/jobs`, `/api/jobs/<id>`, and what the
pages poll to update themselves (`/api/overview`, `/api/queue`, `/api/jobs/<id>/live`:
`live.py`; `/api/workers`: `workers.py`); `/metrics`; the probes `/health`,
`/health/live`, `/health/ready` (`health.py`). Behind a reverse proxy: `proxy`.
Templates (Jinja2, autoescape on), static files and the message catalogs ship in this
package. Auth and CSRF: `cronjobs.web.auth`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from flask import Flask, Request, request, session
from flask_babel import Babel
from flask_wtf.csrf import CSRFProtect

from .. import i18n
from ..app import App
from ..errors import ConfigError

HERE = Path(__file__).parent
LANGUAGES = ("en", "tr")


def select_locale() -> str:
    """`?lang=` (remembered in the session), else the session's, else Accept-Language."""
    lang = request.args.get("lang")
    if lang in LANGUAGES:
        session["lang"] = lang
        return lang
    if session.get("lang") in LANGUAGES:
        return session["lang"]
    return request.accept_languages.best_match(LANGUAGES) or "en"


def _request_locale() -> str | None:
    """The locale of the current dashboard request, or None outside a request."""
    from flask import has_request_context
    from flask_babel import get_locale

    return str(get_locale()) if has_request_context() else None


def _config(app: App, token: str) -> dict:
    """The Flask settings of the dashboard of `app` signed with `token`."""
    return dict(
        # Derived from the token: every dashboard process of one system shares sessions,
        # and changing the token logs everyone out.
        SECRET_KEY=hashlib.sha256(b"cronjobs-dashboard-session\0" + token.encode()).hexdigest(),
        SESSION_COOKIE_NAME="cronjobs_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=app.settings.dashboard.secure_cookie,
        PERMANENT_SESSION_LIFETIME=timedelta(hours=app.settings.dashboard.session_hours),
        WTF_CSRF_CHECK_DEFAULT=False,  # checked in auth.require_login for cookie sessions
        WTF_CSRF_TIME_LIMIT=None,      # valid as long as the session
        BABEL_TRANSLATION_DIRECTORIES=str(HERE / "translations"),
        MAX_CONTENT_LENGTH=64 * 1024,
    )


def create_app(app: App, token: str | None = None, *,
               authorize: Callable[[Request], object | None] | None = None,
               login_url: str | None = None) -> Flask:
    """Build the dashboard for `app`.

    A WSGI app: serve it alone or mount it under a path of your web app (docs/mounting.md);
    links, redirects, static files and the session cookie follow the WSGI `SCRIPT_NAME`.

    Args:
        app: the system to show.
        token: the dashboard token; default `app.settings.dashboard.token` (the commands
            pass the database's generated token on loopback when none is configured).
            It also signs the dashboard's session cookie (`cronjobs_session`).
        authorize: your app's login, asked on every request: `authorize(request)` gets
            the Flask request (its `cookies`, `headers` and WSGI `environ`) and returns
            the signed-in user (an admin, `str(user)` in the actions' records), or None:
            then the token decides (Bearer header or login form). Only a truthy value is
            a user: False, "", 0 or an empty list count as None. Its errors are a 500.
        login_url: your app's login page (`/login`): a signed-out browser is sent there
            (303) with `?next=<the full mounted path>` (`/jobs/queue?status=failed`)
            instead of the dashboard's token form; JSON requests (`/api/...`) still get
            401. None: the token form.

    Returns:
        The Flask application (WSGI).

    Raises:
        ConfigError: no dashboard token.
    """
    token = token or app.settings.dashboard.token
    if not token:
        raise ConfigError("the dashboard needs a token: set CRONJOBS_DASHBOARD_TOKEN")
    web = Flask("cronjobs.web", template_folder=str(HERE / "templates"),
                static_folder=str(HERE / "static"))
    web.config.update(_config(app, token))
    web.extensions["cronjobs_app"] = app
    web.extensions["cronjobs_token"] = token
    web.extensions["cronjobs_authorize"] = authorize
    web.extensions["cronjobs_login_url"] = login_url
    CSRFProtect(web)
    Babel(web, locale_selector=select_locale)
    i18n.set_locale_selector(_request_locale)  # handlers' Results-tab labels follow the page
    _install(web, app)
    return web


def _install(web: Flask, app: App) -> None:
    """Filters, error pages, the blueprints and the auth checks of the dashboard `web`.

    The page modules are imported here, when a dashboard is built, so that importing
    `cronjobs.web` (the commands import `cronjobs.web.server`) loads none of them.
    """
    from . import (
        api,
        auth,
        control,
        dispatchapi,
        failed,
        family,
        fields,
        flow,
        health,
        jobs,
        live,
        openapi,
        operations,
        overview,
        proxy,
        results,
        schedules,
        tasks,
        times,
        view,
        workers,
    )

    view.install(web)
    times.install(web)
    tasks.install(web)
    proxy.install(web, app.settings.dashboard.proxy)
    for blueprint in (auth.bp, overview.bp, tasks.bp, jobs.bp, fields.bp, workers.bp, failed.bp,
                      operations.bp, api.bp, live.bp, flow.bp, family.bp, schedules.bp):
        web.register_blueprint(blueprint)
    web.register_blueprint(dispatchapi.bp)  # POST /api/jobs, /api/jobs:batch
    web.register_blueprint(results.bp)
    for blueprint in (control.bp, openapi.bp):  # the operator's POST routes, the OpenAPI
        web.register_blueprint(blueprint)
    health.install(web)
    auth.install(web)
