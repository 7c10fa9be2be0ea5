"""Your Flask app with the cronjobs dashboard at /jobs, behind your own login.

Run it: `CRONJOBS_DATABASE_URL=... CRONJOBS_DASHBOARD_TOKEN=... flask --app
'examples/mounting/flask_host.py:main()' run`, sign in at /login (ada / lovelace), open /jobs/.
"""

from __future__ import annotations

from flask import Flask, redirect, render_template_string, request, session
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from cronjobs.app import App
from cronjobs.web import create_app
from cronjobs.web.auth import safe_next

LOGIN = """<form method="post"><input name="user" placeholder="user">
<input name="password" type="password" placeholder="password">
<button type="submit">Sign in</button></form>{{ error }}"""


def create_host(app: App, secret_key: str, users: dict[str, str]) -> Flask:
    """Your app: its own login (a Flask session) and the dashboard of `app` at /jobs,
    open to whoever is signed in."""
    host = Flask(__name__)
    host.secret_key = secret_key

    @host.route("/login", methods=["GET", "POST"])
    def login():
        if request.method == "POST":
            user = request.form.get("user", "")
            if users.get(user) == request.form.get("password"):
                session["user"] = user
                return redirect(back_to(request.args.get("next")), 303)
            return render_template_string(LOGIN, error="Wrong password."), 401
        return render_template_string(LOGIN, error="")

    def signed_in(dashboard_request) -> str | None:
        """Our login decides: the user in our session cookie, or None."""
        ours = host.session_interface.open_session(host, dashboard_request)
        return (ours or {}).get("user")

    # A signed-out visitor of /jobs/... is sent to our /login?next=/jobs/...
    dashboard = create_app(app, authorize=signed_in, login_url="/login")
    host.wsgi_app = DispatcherMiddleware(host.wsgi_app, {"/jobs": dashboard})
    return host


def back_to(target: str | None) -> str:
    """Where to go after signing in: `next` when it is a page of the dashboard, else /jobs/
    (never another site: `safe_next` refuses hosts, `//`, `..` and the like)."""
    target = safe_next(target)
    return target if target.startswith("/jobs/") else "/jobs/"


def main() -> Flask:
    """The app for `flask --app 'flask_host.py:main()' run`: settings from the environment."""
    return create_host(App(), "change me", {"ada": "lovelace"})
