"""Test helpers for alerts: a local HTTP server that receives webhooks (and Telegram Bot API
calls), answering with the status codes it is told to; health reports made by hand."""

from __future__ import annotations

import json
import socket
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cronjobs.health import Check, HealthReport


class Inbox:
    """A local HTTP server that records every POST.

    Attributes:
        posts: `(path, JSON body)` of every POST answered 200, in order.
        attempts: `(path, JSON body, status answered)` of every POST.
        answers: status codes to answer the next POSTs with (then 200).
        hold: when set, a POST waits for `release` before answering; `arrived` is set
            when one is waiting.
    """

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict]] = []
        self.attempts: list[tuple[str, dict, int]] = []
        self.answers: list[int] = []
        self.hold = False
        self.arrived, self.release = threading.Event(), threading.Event()
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if inbox.hold:
                    inbox.arrived.set()
                    inbox.release.wait(30)
                code = inbox.answers.pop(0) if inbox.answers else 200
                inbox.attempts.append((self.path, body, code))
                if code == 200:
                    inbox.posts.append((self.path, body))
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def hooks(self) -> list[dict]:
        """Bodies of the webhook POSTs that were answered 200."""
        return [body for path, body in self.posts if path == "/hook"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(at: datetime, *problems: tuple[str, str, str, str]) -> HealthReport:
    """A health report of the checks `resources` and `workers` at `at`, with `problems`
    given as `(check, key, status, message)`."""
    checks = {name: Check(name) for name in ("resources", "workers")}
    for check, key, status, message in problems:
        checks[check].problem(key, status, message)
    status = max((c.status for c in checks.values()), key=("ok", "warn", "fail").index)
    return HealthReport(status, list(checks.values()), at, 1.0)
