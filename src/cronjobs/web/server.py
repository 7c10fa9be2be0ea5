"""Serving the dashboard: the token rule, the listening socket, `cronjobs dashboard`."""

from __future__ import annotations

import ipaddress
import logging
import secrets

from werkzeug.serving import BaseWSGIServer, make_server

from ..app import App
from ..errors import ConfigError

log = logging.getLogger("cronjobs.web")


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def ensure_token(app: App, host: str) -> str | None:
    """Make sure the dashboard has a token before it listens on `host`.

    Returns:
        A token generated for this run (loopback without a configured token), to be
        printed; None when one was configured.

    Raises:
        ConfigError: `host` is not loopback and no token is configured.
    """
    if app.settings.dashboard_token:
        return None
    if not is_loopback(host):
        raise ConfigError(f"refusing to serve the dashboard on {host} without a token: set "
                          f"CRONJOBS_DASHBOARD_TOKEN (or listen on 127.0.0.1)")
    token = secrets.token_urlsafe(18)
    app.settings = app.settings.model_copy(update={"dashboard_token": token})
    return token


def login_hint(url: str, generated: str | None) -> str:
    """The lines that tell a person how to log in."""
    if generated:
        return (f"  log in at {url}/login with the token {generated}\n"
                f"  (generated for this run; set CRONJOBS_DASHBOARD_TOKEN to choose one)")
    return f"  log in at {url}/login with CRONJOBS_DASHBOARD_TOKEN"


def open_server(app: App, host: str, port: int) -> tuple[BaseWSGIServer, str, str | None]:
    """Check the token rule and bind the dashboard's socket (threaded).

    Returns:
        `(server, base URL, generated token or None)`.

    Raises:
        ConfigError: see `ensure_token`; or the port cannot be bound.
    """
    from . import create_app

    generated = ensure_token(app, host)
    try:
        server = make_server(host, port, create_app(app), threaded=True)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host
    return server, f"http://{shown}:{server.server_port}", generated


def run_dashboard(app: App, host: str, port: int, *, signals=None) -> int:  # noqa: ANN001
    """`cronjobs dashboard`: serve the pages until SIGTERM/SIGINT; returns 0."""
    import threading

    from ..worker import Signals

    signals = signals or Signals().install()
    server, url, generated = open_server(app, host, port)
    thread = threading.Thread(target=server.serve_forever, name="cronjobs-web", daemon=True)
    thread.start()
    print(f"cronjobs dashboard at {url}/  (Ctrl-C to stop)\n{login_hint(url, generated)}", flush=True)
    signals.stop.wait()
    server.shutdown()
    return 0
