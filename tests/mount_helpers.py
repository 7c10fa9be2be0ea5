"""The two host apps of docs/mounting.md (examples/mounting/), each with the dashboard at
/jobs behind the host's own login, and one small client interface over Werkzeug's test
client (the Flask host, WSGI) and Starlette's TestClient (the FastAPI host, ASGI)."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from cronjobs.app import App

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "mounting"
MOUNTS = ("flask", "fastapi")
USERS = {"ada": "lovelace"}
SECRET = "host-secret-key-for-tests"
URL_ATTR = re.compile(r'\b(?:href|src|action)="([^"]*)"')


def example(mount: str):
    """The module examples/mounting/<mount>_host.py."""
    spec = importlib.util.spec_from_file_location(f"{mount}_host", EXAMPLES / f"{mount}_host.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_app(mount: str, app: App):
    """The host app of `mount` (WSGI for flask, ASGI for fastapi) serving `app` at /jobs."""
    return example(mount).create_host(app, SECRET, USERS)


@dataclass
class Answer:
    """One response: status, headers (lower-case names; Set-Cookie as a list), body."""

    status: int
    headers: dict
    cookies: list[str]
    text: str


class Client:
    """A test client of one host app that keeps cookies, follows no redirect."""

    def __init__(self, mount: str, app: App) -> None:
        self.mount = mount
        host = host_app(mount, app)
        if mount == "flask":
            self.client = host.test_client()
        else:
            from starlette.testclient import TestClient

            self.client = TestClient(host, follow_redirects=False)

    def _answer(self, resp) -> Answer:
        if self.mount == "flask":
            with resp:  # a static file's response holds the file open until closed
                return Answer(resp.status_code, {k.lower(): v for k, v in resp.headers.items()},
                              resp.headers.getlist("Set-Cookie"), resp.get_data(as_text=True))
        return Answer(resp.status_code, dict(resp.headers), resp.headers.get_list("set-cookie"),
                      resp.text)

    def get(self, path: str, **headers: str) -> Answer:
        """GET `path` (with its query)."""
        return self._answer(self.client.get(path, headers=headers))

    def post(self, path: str, data: dict | None = None, **headers: str) -> Answer:
        """POST the form `data` to `path`."""
        return self._answer(self.client.post(path, data=data or {}, headers=headers))

    def sign_in(self, user: str = "ada") -> Answer:
        """Sign in through the host's own login form."""
        resp = self.post("/login", {"user": user, "password": USERS[user]})
        assert resp.status == 303 and resp.headers["location"].endswith("/jobs/"), resp
        return resp
