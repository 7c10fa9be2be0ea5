"""Helpers for tests of real dashboard processes: `cronjobs dashboard` as a subprocess,
plain HTTP requests (no redirect followed, cookies by hand) and a small reverse proxy."""

from __future__ import annotations

import http.client
import re
import signal
import ssl
import subprocess
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlencode, urlsplit

URL_LINE = re.compile(r"dashboard at (http://127\.0\.0\.1:\d+)/")
TOKEN_LINE = re.compile(r"log in at \S+ with the token (\S+)")


class Dashboard:
    """`cronjobs dashboard --port 0` as a real process.

    Attributes:
        url: its base URL (`http://127.0.0.1:PORT`), once it printed it.
        token: the generated token it printed, or None when one was configured.
    """

    def __init__(self, env: dict, cwd: Path, name: str = "dashboard") -> None:
        self.log = open(cwd / f"{name}.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "dashboard", "--port", "0"],
                                     env=env, cwd=cwd, text=True, stdout=subprocess.PIPE,
                                     stderr=self.log)
        self.lines: list[str] = []
        self.url: str | None = None
        self.token: str | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if m := URL_LINE.search(line):
                self.url = m[1]
            if m := TOKEN_LINE.search(line):
                self.token = m[1]
            if "log in at" in line:
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout: float = 60) -> Dashboard:
        """Wait until it printed its URL and login line."""
        assert self._ready.wait(timeout) and self.url, "".join(self.lines) + self._stderr()
        return self

    def _stderr(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def stop(self) -> int:
        """SIGTERM, then its exit status."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
            self.log.close()


@dataclass
class Answer:
    """One HTTP response: status, headers (`get`, `get_all`), body."""

    status: int
    headers: object
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def cookies(self) -> dict[str, str]:
        """The `Set-Cookie` headers by cookie name (the whole header value)."""
        return {v.split("=", 1)[0]: v for v in self.headers.get_all("Set-Cookie") or []}


def request(url: str, method: str = "GET", *, data: dict | None = None,
            headers: dict | None = None, cookie: str | None = None) -> Answer:
    """One request to `url` (http or https, any certificate); redirects are not followed."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # self-signed
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=30,
                                           context=context)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = dict(headers or {})
    body = None
    if data is not None:
        body = urlencode(data).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    if cookie:
        headers["Cookie"] = cookie
    try:
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body, headers)
        resp = conn.getresponse()
        return Answer(resp.status, resp.headers, resp.read())
    finally:
        conn.close()


def cookie_pair(set_cookie: str) -> str:
    """`name=value` of a `Set-Cookie` header."""
    return set_cookie.split(";", 1)[0]


HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailers", "transfer-encoding", "upgrade", "host"}


class PrefixProxy:
    """A threaded reverse proxy on 127.0.0.1, like nginx's
    `location /PREFIX/ { proxy_pass http://BACKEND/; }`: requests under `PREFIX/` go to the
    backend without the prefix, with X-Forwarded-For/-Proto/-Host/-Prefix set; anything
    else is 404 from the proxy itself. With `tls=(cert, key)` it serves HTTPS.

    Attributes:
        url: the proxy's base URL including the prefix (`https://127.0.0.1:PORT/cronjobs`).
        seen: every path the proxy was asked for.
    """

    def __init__(self, backend: str, prefix: str = "/cronjobs",
                 tls: tuple[Path, Path] | None = None) -> None:
        outer = self
        self.backend, self.prefix, self.seen = urlsplit(backend), prefix, []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                outer.seen.append(self.path)
                if not self.path.startswith(outer.prefix + "/"):
                    self.send_response(404, "not under the prefix")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                headers.update({"X-Forwarded-For": self.client_address[0],
                                "X-Forwarded-Proto": "https" if tls else "http",
                                "X-Forwarded-Host": self.headers["Host"],
                                "X-Forwarded-Prefix": outer.prefix})
                conn = http.client.HTTPConnection(outer.backend.hostname, outer.backend.port,
                                                  timeout=60)
                try:
                    conn.request(self.command, self.path[len(outer.prefix):], body, headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status, resp.reason)
                for key, value in resp.getheaders():
                    if key.lower() not in HOP_BY_HOP | {"content-length"}:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        scheme = "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.origin = f"{scheme}://127.0.0.1:{self.server.server_port}"
        self.url = self.origin + prefix
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
