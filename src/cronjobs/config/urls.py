"""The broker and uptime-check URLs cronjobs accepts, and the database URLs (`store.urls`,
where every dialect is named), re-exported for the settings."""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ..limits import URL_MAX_CHARS
from ..store.urls import DATABASE_SCHEME_FOR, SUPPORTED_DATABASE_SCHEMES, check_database_url

__all__ = ["AMQP_SCHEMES", "DATABASE_SCHEME_FOR", "MEMORY_BROKER", "REDIS_SCHEMES",
           "SUPPORTED_DATABASE_SCHEMES", "check_broker_url", "check_database_url",
           "check_http_url", "check_ping_url", "hide_password"]
__all__ += ["check_callback_url", "check_webhook_url"]
__all__ += ["is_private_address", "private_literal_host"]

MEMORY_BROKER = "memory://"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
AMQP_SCHEMES = ("amqp://", "amqps://")


def check_broker_url(value: str) -> str:
    """`value` when it is a broker URL cronjobs speaks.

    Raises:
        ValueError: any other scheme (the message names the ones to use); a URL whose
            port is not a number from 0 to 65535, or whose IPv6 host is not closed.
    """
    if not value.startswith((MEMORY_BROKER, *REDIS_SCHEMES, *AMQP_SCHEMES)):
        raise ValueError(f"unsupported broker URL {hide_password(value)!r}: use memory://, "
                         f"redis://... or amqp://...")
    try:
        _ = urlsplit(value).port  # a port that is not a number fails here, not in a worker
    except ValueError as exc:  # a port out of range or not a number, a broken IPv6 host
        raise ValueError(f"the broker URL cannot be read ({exc}): check its host, and its "
                         f"port (a number from 0 to 65535)") from None
    return value


def check_http_url(value: str) -> str:
    """`value` when it is a URL the uptime checks can GET: http:// or https:// with a host.

    Raises:
        ValueError: naming the value (`'not a url'`, `ftp://...`, `https://` with no host,
            a space or a control character, a port that is not a number from 1 to 65535).
    """
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"{value!r:.120} contains a space or a control character (write "
                         f"a space in a path or query as %20)")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{value!r:.120} is not a URL that can be read ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r:.120} is not an http:// or https:// URL with a host")
    if port == 0:
        raise ValueError(f"{value!r:.120} names port 0, which nothing can listen on")
    return value


def hide_password(url: str) -> str:
    """`url` with its password shown as `***` (also in a URL SQLAlchemy cannot parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def check_ping_url(cls: type) -> None:
    """Check a handler class's `PING_URL`: None, or an http(s) URL with a host.

    Raises:
        ValueError: naming the value (`PING_URL 'x' is not an http:// or https:// URL ...`).
    """
    value = getattr(cls, "PING_URL", None)
    if value is None:
        return
    if not isinstance(value, str):
        raise ValueError(f"PING_URL must be an http(s) URL or None, got {value!r}")
    try:
        check_http_url(value)
    except ValueError as exc:
        raise ValueError(f"PING_URL {exc}") from None


def check_callback_url(value: object, what: str = "callback_url") -> str:
    """`value` when it is a webhook URL: http:// or https:// with a host, at most
    `limits.URL_MAX_CHARS` (2,048) characters.

    Args:
        what: the name of the value in the error (`callback_url`, `WEBHOOK_URL`).

    Raises:
        ValueError: one line naming `what` and the value (not a string, too long, not an
            http(s) URL with a host, a space or a control character).
    """
    if not isinstance(value, str):
        raise ValueError(f"{what} must be an http(s) URL, got {value!r:.120}")
    if len(value) > URL_MAX_CHARS:
        raise ValueError(f"{what} is {len(value)} characters long, over the limit of "
                         f"{URL_MAX_CHARS}: {value[:60]!r}...")
    try:
        check_http_url(value)
    except ValueError as exc:
        raise ValueError(f"{what} {exc}") from None
    if not value.isascii():
        raise ValueError(f"{what} {value!r:.120} has a character that is not ASCII: write "
                         f"the host in IDNA (xn--...) and the path percent-encoded (%C3%A4)")
    if "@" in urlsplit(value).netloc:
        raise ValueError(f"{what} {hide_password(value)!r:.120} has a user name or password "
                         f"in it: a webhook URL carries none (the signature authenticates "
                         f"the POST)")
    return value


def is_private_address(address: str) -> bool:
    """Whether IP `address` (IPv4 or IPv6 text) is one a webhook must not reach unless
    allowed (`webhook_allow_private`): loopback, private, link-local (169.254.x.x, the
    cloud metadata address), reserved, multicast, unspecified, or not an address at all.
    An IPv4 address mapped into IPv6 (`::ffff:127.0.0.1`) is judged as the IPv4 one."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_reserved
            or ip.is_multicast or ip.is_unspecified or not ip.is_global)


def private_literal_host(url: str) -> str | None:
    """The host of http(s) `url` when it names a private address without DNS: an IP
    literal `is_private_address` refuses, or `localhost` (`*.localhost`); else None (a
    name, checked again when resolved at send time).

    IPv4 literals count in every form a client accepts (`socket.inet_aton`): `127.1`,
    `2130706433`, `0x7f000001`, `0177.0.0.1`, `0`. A host whose last label is a number
    that is no such address (`1.2.3.999`), or a bracketed IPv6 literal `ipaddress`
    cannot read (`[v1.x]`), is refused too: it is no name DNS could answer.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return host
    address = _literal_address(host, bracketed=parts.netloc.rpartition("@")[2].startswith("["))
    if address is None:
        return None
    return host if is_private_address(address) else None


_NUMBER_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")  # a label a client reads as a number


def _literal_address(host: str, bracketed: bool) -> str | None:
    """The canonical IP address text `host` names without DNS, `""` (never an address)
    for a literal that cannot be read, or None for a name."""
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        if bracketed:  # `[v1.x]`, `[::1x]`: an IPv6 literal no client could connect to
            return ""
    if not _NUMBER_LABEL.fullmatch(host.rsplit(".", 1)[-1]):
        return None  # a name (its last label is not a number)
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:  # `1.2.3.999`, `1.2.3.4.5`: no address, and no name either
        return ""


def check_webhook_url(cls: type) -> None:
    """Check a handler class's `WEBHOOK_URL`: None, or a URL `check_callback_url` takes.

    Raises:
        ValueError: naming the value (`WEBHOOK_URL 'x' is not an http:// or https:// URL ...`).
    """
    value = getattr(cls, "WEBHOOK_URL", None)
    if value is not None:
        check_callback_url(value, "WEBHOOK_URL")
