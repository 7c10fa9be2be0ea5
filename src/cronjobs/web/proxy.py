"""The dashboard behind a reverse proxy: URL prefix, scheme and host from the proxy.

With `dashboard_proxy = N` (N proxies in front), Werkzeug's `ProxyFix` trusts the last N
values of `X-Forwarded-For`, `-Proto`, `-Host` and `-Prefix`: a proxy that serves the
dashboard under `/cronjobs/` sends `X-Forwarded-Prefix: /cronjobs`, and every URL the
pages and redirects build with `url_for` carries it. Without the setting those headers
are ignored (anyone could send them).

The session cookie is `Secure` when `dashboard_secure_cookie` is set or when the request
came over HTTPS (as the trusted proxy reports it), and its path is the prefix.
"""

from __future__ import annotations

from flask import Flask, has_request_context, request
from flask.sessions import SecureCookieSessionInterface
from werkzeug.middleware.proxy_fix import ProxyFix


class SessionInterface(SecureCookieSessionInterface):
    """Flask's signed cookie session; Secure and path follow the request (see above)."""

    def get_cookie_secure(self, app: Flask) -> bool:
        """Secure when configured so, or when this request came over HTTPS."""
        return bool(super().get_cookie_secure(app)
                    or (has_request_context() and request.is_secure))

    def get_cookie_path(self, app: Flask) -> str:
        """`SESSION_COOKIE_PATH` when set, else the prefix the proxy reports (or `/`)."""
        if app.config["SESSION_COOKIE_PATH"] or not has_request_context():
            return super().get_cookie_path(app)
        return request.script_root or "/"


def install(web: Flask, proxies: int) -> None:
    """Trust `proxies` reverse proxies' X-Forwarded-* headers (0: none); per-request
    session cookie flags."""
    if proxies:
        web.wsgi_app = ProxyFix(web.wsgi_app, x_for=proxies, x_proto=proxies,
                                x_host=proxies, x_prefix=proxies)
    web.session_interface = SessionInterface()
