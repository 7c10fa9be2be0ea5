"""Your FastAPI app with the cronjobs dashboard at /jobs, behind your own login.

Run it: `CRONJOBS_DATABASE_URL=... CRONJOBS_DASHBOARD_TOKEN=... uvicorn --app-dir
examples/mounting --factory fastapi_host:main`, sign in at /login (ada / lovelace), open /jobs/.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from a2wsgi import WSGIMiddleware
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.middleware.sessions import SessionMiddleware

from cronjobs.app import App
from cronjobs.web import create_app
from cronjobs.web.auth import safe_next

WORKERS = 40  # threads for the dashboard: waiting result requests + page requests
LOGIN = """<form method="post"><input name="user" placeholder="user">
<input name="password" type="password" placeholder="password">
<button type="submit">Sign in</button></form>"""


def create_host(app: App, secret_key: str, users: dict[str, str]) -> FastAPI:
    """Your app: its own login (Starlette's session) and the dashboard of `app` at /jobs,
    open to whoever is signed in."""
    host = FastAPI()
    host.add_middleware(SessionMiddleware, secret_key=secret_key)

    @host.get("/login", response_class=HTMLResponse)
    def login_form() -> str:
        return LOGIN

    @host.post("/login")
    async def login(request: Request):
        form = parse_qs((await request.body()).decode())
        user = form.get("user", [""])[0]
        if users.get(user) == form.get("password", [None])[0]:
            request.session["user"] = user
            return RedirectResponse(back_to(request.query_params.get("next")), 303)
        return HTMLResponse(LOGIN + "Wrong password.", 401)

    def signed_in(dashboard_request) -> str | None:
        """Our login decides: the user of our session (the ASGI scope a2wsgi passes on)."""
        scope = dashboard_request.environ["asgi.scope"]
        return scope.get("session", {}).get("user")

    # A signed-out visitor of /jobs/... is sent to our /login?next=/jobs/... . a2wsgi runs
    # the dashboard in a pool of `workers` threads (10 by default): a request that waits
    # (`GET /jobs/api/jobs/ID/result?wait=60`) holds one for up to 60 s, so give the pool
    # room for your waiters plus the pages (docs/mounting.md).
    dashboard = create_app(app, authorize=signed_in, login_url="/login")
    host.mount("/jobs", WSGIMiddleware(dashboard, workers=WORKERS))
    return host


def back_to(target: str | None) -> str:
    """Where to go after signing in: `next` when it is a page of the dashboard, else /jobs/
    (never another site: `safe_next` refuses hosts, `//`, `..` and the like)."""
    target = safe_next(target)
    return target if target.startswith("/jobs/") else "/jobs/"


def main() -> FastAPI:
    """The app for `uvicorn --factory`: settings from the environment."""
    return create_host(App(), "change me", {"ada": "lovelace"})
