"""Who may use the dashboard: the configured token, as `Authorization: Bearer <token>` or
through the login form (a session cookie: HttpOnly, SameSite=Lax).

Every page, JSON route and action needs it; `/health` answers its status without it
(the full report with it), `/health/live` and `/health/ready` answer anyone, and
`/metrics` is public only when `metrics_public` is set. The public routes (`PUBLIC`)
never call the `authorize` hook: a hook that raises breaks no probe, login or stylesheet.
Actions are POST only (a GET gets 405). A POST from a cookie session must carry the
session's CSRF token (Flask-WTF), or it gets 403 and changes nothing; a Bearer request
needs none (a browser cannot add that header to a forged cross-site request). No CORS
headers are ever sent, and tokens never travel in URLs.

Tokens: the dashboard's own (`CRONJOBS_DASHBOARD_TOKEN` or the database's generated one,
named `dashboard`, scope `admin`; a login session is that token) and those of `cronjobs
tokens create` (`store.tokens`, looked up by hash; a revoked one is 401). A Bearer header
that is sent decides (its scheme in any case): a wrong one is 401, whatever the cookie
session or the `authorize` hook would say. Each request
needs the scope of its view (`scopes.needed`): too small a scope is 403 with a JSON
`error`. `g.token_name` and `g.token_scope` hold who asks; actions record `who()`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import timedelta
from urllib.parse import unquote, urlencode, urlsplit

from flask import (
    Blueprint,
    Flask,
    current_app,
    g,
    jsonify,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from .. import limits
from ..store import tokens
from . import dispatchapi
from .scopes import needed, requires, scope_allows
from .view import cronjobs_app

bp = Blueprint("auth", __name__)
PUBLIC = {"auth.login", "static", "health.report", "health.live", "health.ready"}
# Forms that may carry more than the dashboard's 64 KB: Run now with a payload (a JSON
# payload of up to PAYLOAD_MAX_BYTES, percent-encoded: up to 3 bytes per byte).
LARGE_FORMS = {"tasks.run": 3 * limits.PAYLOAD_MAX_BYTES + 64 * 1024}
# Jobs started over HTTP: a JSON job with a payload of up to PAYLOAD_MAX_BYTES, a batch.
LARGE_FORMS.update({"dispatchapi.create_job": dispatchapi.ONE_MAX_BYTES,
                    "dispatchapi.create_jobs": dispatchapi.BATCH_MAX_BYTES})
LARGE_FORMS["control.run_task"] = 2 * limits.PAYLOAD_MAX_BYTES + 64 * 1024  # JSON escapes


def _fingerprint(token: str) -> str:
    return hashlib.sha256(b"cronjobs-login\0" + token.encode()).hexdigest()[:32]


def dashboard_token() -> str:
    """The token of this dashboard (configured, or the database's generated one)."""
    return current_app.extensions["cronjobs_token"]


TOUCH_EVERY = timedelta(seconds=60)  # a token's last_used_at is written at most this often
TOKEN_MAX_CHARS = 256  # longer Bearer values are no token of ours: no lookup


def _bearer() -> str | None:
    """The token of an `Authorization: Bearer` header (the scheme in any case, RFC 7235)."""
    scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
    return given.strip() if scheme.lower() == "bearer" else None


def body_limit(endpoint: str | None) -> int:
    """The largest body (bytes) route `endpoint` takes: its `LARGE_FORMS` entry, else the
    dashboard's `MAX_CONTENT_LENGTH` (64 KB)."""
    return LARGE_FORMS.get(endpoint or "",
                           current_app.config.get("MAX_CONTENT_LENGTH") or 64 * 1024)


def _stored_token(given: str) -> dict | None:
    """The valid stored token `given` is (`store.tokens.find`), or None; its
    `last_used_at` is written at most once a `TOUCH_EVERY` per token and process."""
    if not given or len(given) > TOKEN_MAX_CHARS:
        return None
    app = cronjobs_app()
    with app.engine.connect() as conn:
        found = tokens.find(conn, given)
    if found is None:
        return None
    touched = current_app.extensions.setdefault("cronjobs_tokens_touched", {})
    now = app.clock.now()
    last = max(filter(None, (touched.get(found["name"]), found["last_used_at"])), default=None)
    if last is None or now - last >= TOUCH_EVERY:
        touched[found["name"]] = now
        with app.engine.begin() as conn:
            tokens.touch(conn, found["name"], now)
    return found


def _as(name: str, scope: str, bearer: bool) -> bool:
    g.token_name, g.token_scope, g.via_bearer = name, scope, bearer
    return True


def host_user() -> object | None:
    """The user your app's `authorize(request)` hook (`create_app(..., authorize=)`) says
    made this request, or None (no hook, or nobody signed in).

    Only a truthy value is a user: None, False, "", 0 or an empty collection means nobody
    (the token decides), never an admin.
    A user is authenticated as an admin: `g.token_name` is `str(user)` (the `who` of the
    actions), `g.user` the user, `g.via_authorize` True. Its POSTs still need the CSRF
    token: the host's login rides on a cookie too.
    """
    hook = current_app.extensions.get("cronjobs_authorize")
    user = hook(request) if hook is not None else None
    if not user:
        return None
    g.via_authorize, g.user, g.token_name = True, user, str(user)
    return user


def host_login():
    """A 303 to your app's login page (`create_app(..., login_url=)`) with
    `?next=<the full mounted path>` (the mount's path, the page, its query) for a GET, or
    None when no `login_url` is set or for a POST (then the token form answers, 401)."""
    url = current_app.extensions.get("cronjobs_login_url")
    if not url or request.method not in ("GET", "HEAD"):  # a POST is refused: 401
        return None
    target = request.script_root + request.full_path.rstrip("?")
    return redirect(f"{url}{'&' if '?' in url else '?'}{urlencode({'next': target})}", 303)


def authenticated(ask_hook: bool = True) -> bool:
    """True when this request carries a valid token (Bearer header: the dashboard's or a
    stored one; or a logged-in session, which is the dashboard's) or the `authorize` hook
    names a user (admin); sets `g.token_name`, `g.token_scope` and `g.via_bearer`.

    Args:
        ask_hook: False for the public routes (`PUBLIC`): the `authorize` hook is not
            called, so a hook that raises never breaks `/health/live` or `/login`.
    """
    token = dashboard_token()
    given = _bearer()
    if given is not None:  # a Bearer header decides: a wrong one never falls back
        if hmac.compare_digest(given.encode(), token.encode()):
            return _as(tokens.DASHBOARD, "admin", True)
        found = _stored_token(given)
        if found is not None:
            return _as(found["name"], found["scope"], True)
        g.bearer_refused = True
        return False
    if ask_hook and host_user() is not None:
        return _as(g.token_name, "admin", False)
    if hmac.compare_digest(str(session.get("auth", "")).encode(), _fingerprint(token).encode()):
        return _as(tokens.DASHBOARD, "admin", False)
    return False


def who() -> str:
    """Who acts in this request, as actions record it: `dashboard` for the dashboard's
    token and its login sessions, `token:NAME` for a stored token (from `g.token_name`),
    the host app's user as its `authorize` hook named it."""
    if g.get("via_authorize"):
        return g.token_name
    name = g.get("token_name") or tokens.DASHBOARD
    return name if name == tokens.DASHBOARD else f"token:{name}"


def _scope_refusal():
    """403 (JSON) when the request's token lacks the scope of its view, else None."""
    view = current_app.view_functions.get(request.endpoint)
    need = needed(view, request.method)
    if scope_allows(g.token_scope, need):
        return None
    path = request.script_root + request.path  # the full path, under a mount too
    return jsonify(error=f"forbidden: {request.method} {path} needs scope {need}; "
                         f"token {g.token_name!r} has {g.token_scope}"), 403


def _wants_json() -> bool:
    return request.path.startswith(("/api/", "/metrics")) or (
        request.accept_mimetypes.best == "application/json")


def require_login():
    """before_request: answer 401 (JSON) or the login page unless authenticated; check CSRF."""
    g.via_bearer = g.via_authorize = False
    g.token_name, g.token_scope = None, None
    endpoint = request.endpoint or ""
    # the pages show their nav and Log out only then; public routes never ask the hook
    g.authenticated = authenticated(ask_hook=endpoint not in PUBLIC)
    app = cronjobs_app()
    public = endpoint in PUBLIC or (endpoint == "api.metrics"
                                    and app.settings.dashboard.metrics_public)
    if not g.authenticated and not public:
        if _wants_json():
            why = ("the token is not valid (unknown or revoked)" if g.get("bearer_refused")
                   else "send Authorization: Bearer <token>")
            return jsonify(error=f"unauthorized: {why}"), 401, {
                "WWW-Authenticate": 'Bearer realm="cronjobs"'}
        return host_login() or (render_template(
            "login.html", next=safe_next(request.full_path.rstrip("?")), error=None), 401)
    if g.authenticated and not public and request.endpoint:
        refused = _scope_refusal()
        if refused is not None:
            return refused
    if endpoint in LARGE_FORMS:  # only once the token is known: a stranger gets 64 KB
        request.max_content_length = request.max_form_memory_size = LARGE_FORMS[endpoint]
    if request.path.startswith("/api/") and request.method == "POST":
        # one byte past the limit: a longer chunked body is a 413 (dispatchapi.read_bytes)
        request.max_content_length = body_limit(request.endpoint) + 1
    if request.method == "POST" and not g.via_bearer:
        current_app.extensions["csrf"].protect()
    return None


# Anything a browser may drop or read as a slash: control characters, whitespace,
# backslashes; and any non-ASCII (a `next` this dashboard makes is ASCII).
_UNSAFE = re.compile(r"[^\x21-\x7e]|\\")


def safe_next(target: str | None, root: str = "") -> str:
    """`target` if it is a path of this dashboard, else `/`.

    A same-site relative path only: it starts with one `/`, has no scheme or host, and
    neither it nor its path percent-decoded (repeatedly, so `%252F` counts) holds a
    control character, whitespace, a backslash or a leading `//` — browsers drop tabs and
    newlines and read `\\` as `/`, so `/<TAB>/evil.example` would leave the site. Nor may
    a segment of the decoded path be `.` or `..` (`/..//evil.example` under a mount
    resolves to `//evil.example`, `/../logout` to the host's page).

    Args:
        target: the `next` the request carries (query or form).
        root: the mount's path (`request.script_root`, e.g. `/jobs`): a target that
            starts with it and is no dashboard path as it is (`/jobs/queue`) loses it once.

    Returns:
        The path relative to the dashboard's root (callers add `request.script_root`),
        never one that starts with `//` (`/jobs//evil.com` under `/jobs` is `/`).
    """
    if not target or _UNSAFE.search(target):
        return "/"
    parts = urlsplit(target)
    path = target.split("?", 1)[0].split("#", 1)[0]  # urlsplit would fold `///x` to `/x`
    for _ in range(4):
        path, before = unquote(path), path
        if path == before:
            break
    if (parts.scheme or parts.netloc or not path.startswith("/") or path.startswith("//")
            or _UNSAFE.search(path) or {".", ".."} & set(path.split("/"))):
        return "/"
    path = _unmounted(target, root)
    return "/" if path.startswith("//") else path  # `/jobs//evil.com` less `/jobs`


def _unmounted(target: str, root: str) -> str:
    """`target` without the mount's path `root` when it starts with it and is no route of
    this dashboard as it is (`/jobs/5` under `/jobs` stays: it is a job's page)."""
    if not root or not target.startswith(root + "/"):
        return target
    adapter = current_app.url_map.bind("localhost")
    path = target.split("?", 1)[0].split("#", 1)[0]
    try:
        adapter.match(path, method="GET")
        return target
    except HTTPException:
        return target[len(root):]


@bp.route("/login", methods=["GET", "POST"])
def login():
    """The login form; a right token starts a session and goes to `next`."""
    from flask_babel import gettext as _

    if request.method == "GET":
        return render_template("login.html", error=None,
                               next=safe_next(request.args.get("next"), request.script_root))
    token = dashboard_token()
    given = request.form.get("token", "")
    if not hmac.compare_digest(given.encode(), token.encode()):
        return render_template("login.html",
                               next=safe_next(request.form.get("next"), request.script_root),
                               error=_("Wrong token.")), 401
    lang = session.get("lang")
    session.clear()
    session.permanent = True
    session["auth"] = _fingerprint(token)
    if lang:
        session["lang"] = lang
    return redirect(request.script_root + safe_next(request.form.get("next"), request.script_root),
                    303)


@bp.post("/logout")
@requires("read")
def logout():
    """End the session."""
    session.clear()
    return redirect(url_for("auth.login"), 303)


def _csrf_failed(exc: CSRFError):
    if _wants_json():
        return jsonify(error=f"CSRF check failed: {exc.description} (a cookie session's POST "
                             f"needs its CSRF token; or send Authorization: Bearer)"), 403
    return render_template("error.html", code=403,
                           message=f"CSRF check failed: {exc.description}"), 403


def _too_large(exc: RequestEntityTooLarge):
    """413 in one line naming the route's limit (`body_limit`), JSON under `/api/`."""
    size = f"{request.content_length:,} bytes" if request.content_length else "too large"
    message = (f"the body is {size}; the limit of {request.method} "
               f"{request.script_root}{request.path} is {body_limit(request.endpoint):,} bytes")
    if _wants_json():
        return jsonify(error=message), 413
    return render_template("error.html", code=413, message=message), 413


def install(web: Flask) -> None:
    """Hook the checks into `web`."""
    web.before_request(require_login)
    web.register_error_handler(CSRFError, _csrf_failed)
    web.register_error_handler(RequestEntityTooLarge, _too_large)
