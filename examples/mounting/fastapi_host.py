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
            return RedirectResponse("/jobs/", 303)
        return HTMLResponse(LOGIN + "Wrong password.", 401)

    def signed_in(dashboard_request) -> str | None:
        """Our login decides: the user of our session (the ASGI scope a2wsgi passes on)."""
        scope = dashboard_request.environ["asgi.scope"]
        return scope.get("session", {}).get("user")

    host.mount("/jobs", WSGIMiddleware(create_app(app, authorize=signed_in)))
    return host


def main() -> FastAPI:
    """The app for `uvicorn --factory`: settings from the environment."""
    return create_host(App(), "change me", {"ada": "lovelace"})
