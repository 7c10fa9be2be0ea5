"""Serving the dashboard: the token rule, the listening socket, `cronjobs dashboard`."""

from __future__ import annotations

import ipaddress
import logging
import secrets
import socket
import threading

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from .. import store
from ..app import App
from ..errors import ConfigError, StoreError
from ..store.db import run_in_transaction
from . import create_app

log = logging.getLogger("cronjobs.web")


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


TOKEN_SECRET = "dashboard_token"  # the name of the generated token in `cronjob_secret`
PUBLIC_TOKEN_MIN_CHARS = 16  # a configured token beyond loopback (the generated one: 24)


def ensure_token(app: App, host: str) -> tuple[str, bool]:
    """The token the dashboard needs before it listens on `host`.

    Without a configured token, on loopback only, the token is generated once per database
    and kept in it (`cronjob_secret`): every dashboard on that database uses the same one,
    so each accepts the others' session cookies. `app.settings` is left as it is; the
    token is passed on explicitly (`create_app(app, token)`).

    Returns:
        `(token, generated)`: `generated` is True when it is the database's generated
        token (to be printed), False when it was configured.

    Raises:
        ConfigError: `host` is not loopback and no token is configured, or a token of
            fewer than `PUBLIC_TOKEN_MIN_CHARS` characters; or the database cannot keep
            the token (not migrated, unreachable).
    """
    token = app.settings.dashboard.token
    if token and not is_loopback(host) and len(token) < PUBLIC_TOKEN_MIN_CHARS:
        raise ConfigError(f"refusing to serve the dashboard on {host} with a token of "
                          f"{len(token)} characters: use at least {PUBLIC_TOKEN_MIN_CHARS} "
                          f"(e.g. python -c 'import secrets; print(secrets.token_urlsafe(18))')")
    if token:
        return token, False
    if not is_loopback(host):
        raise ConfigError(f"refusing to serve the dashboard on {host} without a token: set "
                          f"CRONJOBS_DASHBOARD_TOKEN (or listen on 127.0.0.1)")
    now = app.clock.now()
    try:
        token = run_in_transaction(app.engine, lambda conn: store.secrets.get_or_create(
            conn, TOKEN_SECRET, lambda: secrets.token_urlsafe(18), now))
    except StoreError as exc:
        raise ConfigError(f"cannot keep the generated dashboard token in the database "
                          f"({exc}); run `cronjobs migrate`, or set "
                          f"CRONJOBS_DASHBOARD_TOKEN") from None
    return token, True


def login_hint(url: str, generated: str | None) -> str:
    """The lines that tell a person how to log in."""
    if generated:
        return (f"  log in at {url}/login with the token {generated}\n"
                f"  (generated once and kept in the database; set CRONJOBS_DASHBOARD_TOKEN "
                f"to choose one)")
    return f"  log in at {url}/login with CRONJOBS_DASHBOARD_TOKEN"


# Seconds one read of a client's socket may wait (request line, headers, body; an idle
# keep-alive connection): a client that stops sending is dropped then, its thread freed.
# A `?wait=60` request reads nothing while it waits, so this never cuts it short.
READ_TIMEOUT_SECONDS = 30.0


def _handler(read_timeout: float) -> type[WSGIRequestHandler]:
    """Werkzeug's request handler whose socket reads time out after `read_timeout` s."""
    return type("TimedRequestHandler", (WSGIRequestHandler,), {"timeout": read_timeout})


def open_server(app: App, host: str, port: int, *,
                read_timeout: float = READ_TIMEOUT_SECONDS,
                ) -> tuple[BaseWSGIServer, str, str | None]:
    """Check the token rule and bind the dashboard's socket (threaded).

    Args:
        read_timeout: seconds one read of a connection may wait before the connection
            is closed (`READ_TIMEOUT_SECONDS`: 30): a client sending half a request
            never holds its thread for longer.

    Returns:
        `(server, base URL, generated token or None)`.

    Raises:
        ConfigError: see `ensure_token`; or the port cannot be bound.
    """
    token, generated = ensure_token(app, host)
    listening = _listen(host, port)
    bound = listening.getsockname()[1]  # the port chosen, for port 0
    try:
        server = make_server(host, port, create_app(app, token), threaded=True,
                             request_handler=_handler(read_timeout), fd=listening.fileno())
    finally:
        listening.close()  # the server holds its own descriptor of the socket
    shown = f"[{host}]" if ":" in host else host
    return server, f"http://{shown}:{bound}", token if generated else None


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host`:`port` (the address reused, as Werkzeug binds it).
    Bound here, not by Werkzeug, whose own bind prints its own lines and exits the process
    when the port is taken.

    Raises:
        ConfigError: the address cannot be resolved or bound (in use, not ours, denied).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(1024)  # a burst of waiting API clients (`?wait=`) at once
        except BaseException:
            sock.close()
            raise
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def run_dashboard(app: App, host: str, port: int, *, signals=None) -> int:
    """`cronjobs dashboard`: serve the pages until SIGTERM/SIGINT; returns 0."""
    from ..worker.loop import Signals  # lazy: `cronjobs dashboard` alone loads no worker code

    signals = signals or Signals("dashboard: stopping; no new requests",
                                 log, urgent=None).install()
    server, url, generated = open_server(app, host, port)
    thread = threading.Thread(target=server.serve_forever, name="cronjobs-web", daemon=True)
    thread.start()
    print(f"cronjobs dashboard at {url}/  (Ctrl-C to stop)\n{login_hint(url, generated)}",
          flush=True)
    signals.stop.wait()
    server.shutdown()
    return 0
