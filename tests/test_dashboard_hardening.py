"""Security QA of the dashboard server: slow clients are dropped, a raising `authorize`
hook never breaks the public routes, `next` never becomes `//host` under a mount, and
the 403/413 answers name the mounted path and the route's limit."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from cronjobs.store import tokens
from cronjobs.web import create_app
from cronjobs.web.auth import safe_next
from cronjobs.web.server import open_server
from dashboard_helpers import BEARER, TOKEN

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
MOUNT = "http://localhost/jobs/"  # the test client's base URL: SCRIPT_NAME /jobs


def test_a_client_that_stops_halfway_through_its_request_is_dropped(make_app):
    server, url, _ = open_server(make_app(dashboard_token=TOKEN), "127.0.0.1", 0,
                                 read_timeout=0.5)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as slow:
            slow.sendall(b"GET /health/li")  # half a request line, then nothing
            started = time.monotonic()
            assert slow.recv(1024) == b""  # closed by the server, not by our 5 s
            assert 0.4 <= time.monotonic() - started < 3
        with socket.create_connection(("127.0.0.1", port), timeout=5) as quick:
            quick.sendall(b"GET /health/live HTTP/1.0\r\n\r\n")
            assert quick.recv(1024).startswith(b"HTTP/1.1 200")
    finally:
        server.shutdown()
        server.server_close()


def test_public_routes_never_ask_a_raising_authorize_hook(make_app):
    asked = []

    def broken(request):
        asked.append(request.path)
        raise RuntimeError("the host's session store is down")

    client = create_app(make_app(dashboard_token=TOKEN), authorize=broken).test_client()
    for path in ("/health/live", "/health/ready", "/static/style.css", "/login"):
        resp = client.get(path)
        assert resp.status_code == 200, (path, resp.status_code)
        resp.close()
    assert asked == []
    assert client.get("/").status_code == 500 and asked == ["/"]  # documented: a 500
    assert client.get("/", headers=BEARER).status_code == 200  # a Bearer header decides


def test_next_never_starts_with_two_slashes_under_a_mount(make_app):
    web = create_app(make_app(dashboard_token=TOKEN))
    with web.test_request_context("/login", environ_base={"SCRIPT_NAME": "/jobs"}):
        for target in ("/jobs//evil.com", "/jobs///x", "/jobs//evil.com/queue?a=b"):
            assert safe_next(target, "/jobs") == "/", target
        assert safe_next("/jobs/queue", "/jobs") == "/queue"
    page = web.test_client().get("/login?next=/jobs//evil.com", base_url=MOUNT)
    assert 'name="next" value="/"' in page.get_data(as_text=True)


def test_403_and_413_name_the_mounted_path_and_the_limit(make_app):
    app = make_app(dashboard_token=TOKEN)
    with app.engine.begin() as conn:
        reader = tokens.create(conn, "reader", "read", app.clock.now())
    client = create_app(app).test_client()
    resp = client.post("/api/pauses/resume", base_url=MOUNT,
                       headers={"Authorization": f"Bearer {reader}"})
    assert resp.status_code == 403
    assert resp.get_json()["error"].startswith("forbidden: POST /jobs/api/pauses/resume needs")
    resp = client.post("/api/ping/nightly", base_url=MOUNT, headers=BEARER,
                       data=b"x" * 200_000)
    assert resp.status_code == 413
    assert resp.get_json() == {"error": "the body is 200,000 bytes; the limit of POST "
                                        "/jobs/api/ping/nightly is 65,536 bytes"}
