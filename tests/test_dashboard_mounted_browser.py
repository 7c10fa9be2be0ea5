"""The mounted dashboard in Chromium: the Flask host (a real Werkzeug server) and the
FastAPI host (a real uvicorn) of docs/mounting.md, each with the dashboard at /jobs. The
dashboard sends a signed-out visitor to the host's login (`login_url`); the user signs in
there, lands back on /jobs/, opens a failed row and clicks Retry (1280 px), and the Queue
page fits a 390 px phone. No dialog ever opens (the row's text is an XSS attempt)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from werkzeug.serving import make_server

from dashboard_helpers import TOKEN, add_row, row
from mount_helpers import MOUNTS, USERS, host_app

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["sqlite"], indirect=True)]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
XSS = '<img src=x onerror=alert(1)>"><script>alert(2)</script>'


class Served:
    """`host` (WSGI or ASGI) on a real server on a free loopback port, in a thread."""

    def __init__(self, mount: str, host) -> None:
        if mount == "flask":
            self.server = make_server("127.0.0.1", 0, host, threaded=True)
            port = self.server.server_port
            self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        else:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            self.server = uvicorn.Server(uvicorn.Config(host, log_level="warning"))
            self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                           daemon=True)
        self.url = f"http://127.0.0.1:{port}"
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self._answers():
            assert time.monotonic() < deadline, f"{mount} host did not start"
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", int(self.url.rsplit(":", 1)[1])), 1).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if isinstance(self.server, uvicorn.Server):
            self.server.should_exit = True
        else:
            self.server.shutdown()
        self.thread.join(20)


@pytest.mark.parametrize("mount", MOUNTS)
def test_sign_in_through_the_host_and_retry_a_row(make_app, mount, tmp_path):
    from playwright.sync_api import sync_playwright

    app = make_app(dashboard_token=TOKEN)
    job = add_row(app, status="failed", error=XSS, title=XSS, attempts=3)
    shots = Path(os.environ.get("CRONJOBS_SCREENSHOTS") or tmp_path) / "mounted"
    shots.mkdir(parents=True, exist_ok=True)
    served = Served(mount, host_app(mount, app))
    dialogs: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": 1280, "height": 860})
            page = browser.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(served.url + "/jobs/")  # not signed in yet: the host's login
            page.wait_for_url(served.url + "/login?next=%2Fjobs%2F")
            page.fill("input[name=user]", "ada")
            page.fill("input[name=password]", USERS["ada"])
            page.click("button[type=submit]")
            page.wait_for_url(served.url + "/jobs/")
            assert page.locator("h1").inner_text() == "Overview"
            page.click("header nav a:text-is('Queue')")
            page.wait_for_url(served.url + "/jobs/queue")
            page.goto(f"{served.url}/jobs/jobs/{job}")
            page.screenshot(path=str(shots / f"{mount}-job-1280.png"), full_page=True)
            page.click("button:text-is('Retry')")
            page.locator("button.cancel").wait_for()  # the row is pending: Cancel, no Retry
            assert page.url == f"{served.url}/jobs/jobs/{job}"
            assert row(app, job)["status"] == "pending"
            page.set_viewport_size({"width": 390, "height": 844})
            page.goto(served.url + "/jobs/queue")
            assert page.locator("h1").is_visible()
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
            page.screenshot(path=str(shots / f"{mount}-queue-390.png"), full_page=True)
            browser.close()
    finally:
        served.stop()
    assert dialogs == []
