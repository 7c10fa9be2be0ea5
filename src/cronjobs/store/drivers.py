"""PyMySQL's connections, opened through its public options: one TLS context per process
(per set of the URL's TLS options), the server's greeting awaited for at most
`connect_timeout`, and no COMMIT or ROLLBACK sent in autocommit mode when no transaction
is open.

TLS. With no TLS option, PyMySQL 1.2 tries TLS whenever the server offers it
("PREFERRED") and builds a TLS context, loading the system's CA bundle, for every
connection it opens, also when the server offers none: many times the CPU of the rest of a
local connection. Here, over TCP, the socket is opened first and the server's greeting
read (not consumed) to see whether it offers TLS: if it does, the connection gets the
process's one PREFERRED context (PyMySQL's settings: no verification) as PyMySQL's public
`ssl` argument, else `ssl_disabled`; the same as PREFERRED, with one context per process
instead of one per connection. A URL's TLS options (`ssl_ca`, `ssl_cert`, `ssl_key`,
`ssl_capath`, `ssl_cipher`, `ssl_check_hostname`, `ssl_verify_cert`,
`ssl_verify_identity`, `ssl_key_password`) are made into one `ssl.SSLContext` per distinct
set, with PyMySQL's meaning, shared likewise. A unix socket without TLS options is opened
without TLS (`ssl_disabled`: it protects nothing there, and PyMySQL counts the socket as
secure already).

Greeting. PyMySQL reads the server's greeting with its `read_timeout`, None unless given:
a server that accepts and never answers held a command forever. The TCP socket opened here
waits for the greeting at most `connect_timeout` (PyMySQL's default 10 s, or the URL's),
then is handed to `Connection.connect(sock)`; the rest of the handshake and later reads
have the `read_timeout` (none by default). A unix socket is PyMySQL's own.
"""

from __future__ import annotations

import socket
import ssl
import threading
from functools import cache
from typing import Any

from ..errors import ConfigError

# The TLS options PyMySQL takes as arguments (SQLAlchemy gathers ssl_ca, ssl_cert, ssl_key,
# ssl_capath, ssl_cipher and ssl_check_hostname of a URL into the `ssl` dict instead).
TLS_ARGUMENTS = ("ssl_ca", "ssl_cert", "ssl_key", "ssl_key_password", "ssl_verify_cert",
                 "ssl_verify_identity")

_contexts: dict[tuple, ssl.SSLContext] = {}  # one per distinct set of TLS options
_contexts_lock = threading.Lock()


def connect_pymysql(_dialect: Any, _record: Any, cargs: list, cparams: dict) -> Any:
    """SQLAlchemy `do_connect` listener: a PyMySQL connection opened with `cargs` and
    `cparams` (what the URL and `connect_args` give), with the TLS of `tls_arguments`
    or, over TCP without TLS options, of the server's greeting (awaited for at most
    `connect_timeout` seconds), and the `commit()`/`rollback()` of `_connection_class`.

    Raises:
        ConfigError: the TLS files the URL names cannot be read (`ssl_ca=...`,
            `ssl_cert=...`), or the server asks for an RSA password exchange (MySQL's
            `caching_sha2_password` or `sha256_password` without TLS) and the
            `cryptography` package is not installed.
        pymysql.err.OperationalError: the server cannot be reached, or sent no greeting
            within `connect_timeout` (2003, "Can't connect to MySQL server").
        What `pymysql.connect` raises otherwise (its errors are the DBAPI's).
    """
    try:
        params = tls_arguments(cparams)
    except OSError as exc:  # an ssl_* file that cannot be read
        raise ConfigError(f"the database URL's TLS settings cannot be used: {exc}") from None
    if params.get("defer_connect") or params.get("unix_socket") \
            or params.get("read_default_file"):
        return _connected(lambda: _connection_class()(*cargs, **params))
    sock, tls = _greeted_socket(params)
    if not params.get("ssl") and not params.get("ssl_disabled"):  # PREFERRED
        if tls:
            params["ssl"] = shared_context({})  # PyMySQL's PREFERRED settings
        elif tls is False:
            params["ssl_disabled"] = True
    try:
        conn = _connection_class()(*cargs, **params, defer_connect=True)
    except BaseException:
        sock.close()
        raise
    conn.host_info = f"socket {conn.host}:{conn.port}"  # what PyMySQL's get_host_info() says
    return _connected(lambda: conn.connect(sock) or conn)


def _connected(connect: Any) -> Any:
    """`connect()`, PyMySQL's error for an RSA password exchange without `cryptography`
    made a ConfigError that says what to do."""
    try:
        return connect()
    except RuntimeError as exc:
        if "cryptography" not in str(exc):
            raise
        raise ConfigError(
            f"{exc}: install it (pip install 'cronjobs[rsa]'), or connect over TLS "
            "(ssl_ca=...) or a unix socket (unix_socket=...), where no RSA is needed"
        ) from None


def tls_arguments(cparams: dict) -> dict:
    """`cparams` (PyMySQL's arguments) with the TLS decided where it can be before
    connecting (see the module's text).

    Args:
        cparams: keyword arguments of `pymysql.connect`; not changed.

    Returns:
        A new dict: unchanged when TLS is disabled, given as an `SSLContext`, or read
        from a `read_default_file`; else with the TLS options replaced by `ssl`, a context
        shared by every connection given the same options; else, for a unix socket, with
        `ssl_disabled=True`; else (TCP, no TLS option) unchanged: the server's greeting
        decides.

    Raises:
        OSError: a file the options name cannot be read (`ssl.SSLError` is one).
    """
    params = dict(cparams)
    sslp = params.get("ssl")
    if params.get("ssl_disabled") or params.get("read_default_file") \
            or isinstance(sslp, ssl.SSLContext):
        return params
    given = {key: params.pop(key) for key in TLS_ARGUMENTS if key in params}
    options = _pymysql_ssl_dict(given) or dict(sslp or {})
    if options:
        params["ssl"] = shared_context(options)
    elif params.get("unix_socket"):
        params.pop("ssl", None)
        params["ssl_disabled"] = True
    return params


def _pymysql_ssl_dict(given: dict) -> dict:
    """The `ssl` dict PyMySQL makes of its `ssl_*` arguments (they replace an `ssl` dict);
    {} when none of them asks for TLS."""
    if not any(given.get(key) for key in ("ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert",
                                          "ssl_verify_identity")):
        return {}
    identity = bool(given.get("ssl_verify_identity"))
    verify = True if identity else given.get("ssl_verify_cert")
    options = {"ca": given.get("ssl_ca"), "check_hostname": identity,
               "verify_mode": False if verify is None else verify}
    for key, name in (("ssl_cert", "cert"), ("ssl_key", "key"), ("ssl_key_password", "password")):
        if given.get(key) is not None:
            options[name] = given[key]
    return options


def shared_context(options: dict) -> ssl.SSLContext:
    """The process's `SSLContext` for PyMySQL's `ssl` dict `options` (keys `ca`, `capath`,
    `cert`, `key`, `password`, `cipher`, `check_hostname`, `verify_mode`), built on
    first use as PyMySQL builds it and shared by the later connections. The files are
    read once: a process started before a certificate was replaced keeps the old one.

    Raises:
        OSError: a file of `options` cannot be read (nothing is kept then).
    """
    key = tuple(sorted(options.items(), key=lambda item: item[0]))
    with _contexts_lock:
        if key not in _contexts:
            _contexts[key] = _context(options)
        return _contexts[key]


def _context(options: dict) -> ssl.SSLContext:
    """PyMySQL's meaning of its `ssl` dict: without a CA, no verification (unless
    `verify_mode` asks for it, against the system's CAs); with one, the certificate and,
    unless `check_hostname` is false, the host name are verified."""
    ca, capath = options.get("ca"), options.get("capath")
    no_ca = ca is None and capath is None
    context = ssl.create_default_context(cafile=ca, capath=capath)
    # MySQL's own self-signed certificates fail Python 3.13's strict checks (as PyMySQL)
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    context.check_hostname = not no_ca and bool(options.get("check_hostname", True))
    mode = options.get("verify_mode")
    if isinstance(mode, str):
        mode = mode.lower()
    if mode in (False, "none", "0", "false", "no"):
        context.verify_mode = ssl.CERT_NONE
    elif mode == "optional":
        context.verify_mode = ssl.CERT_OPTIONAL
    elif mode in (True, "required", "1", "true", "yes"):
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_NONE if no_ca else ssl.CERT_REQUIRED
    if "cert" in options:
        context.load_cert_chain(options["cert"], keyfile=options.get("key"),
                                password=options.get("password"))
    if "cipher" in options:
        context.set_ciphers(options["cipher"])
    return context


def _greeted_socket(params: dict) -> tuple[socket.socket, bool | None]:
    """A TCP socket to the server of PyMySQL's arguments `params`, opened as PyMySQL opens
    it, on which the server's greeting has arrived (not consumed) within
    `connect_timeout` seconds, and whether the greeting offers TLS (None: it could not
    be read whole, or is an error packet, which PyMySQL then reads and raises).

    Raises:
        pymysql.err.OperationalError: 2003, the server cannot be reached or sent nothing
            in time (the socket is closed).
    """
    from pymysql.constants import CR
    from pymysql.err import OperationalError

    # PyMySQL's defaults (its documented host, port and connect_timeout)
    host, port = params.get("host") or "localhost", params.get("port") or 3306
    bind = params.get("bind_address")
    sock = None
    try:
        sock = socket.create_connection((host, port), params.get("connect_timeout", 10),
                                        **({"source_address": (bind, 0)} if bind else {}))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        greeting = sock.recv(1024, socket.MSG_PEEK)  # b"" (closed): PyMySQL's read says so
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise OperationalError(CR.CR_CONN_HOST_ERROR,
                               f"Can't connect to MySQL server on {host!r} ({exc})") from exc
    return sock, offers_tls(greeting)


def offers_tls(greeting: bytes) -> bool | None:
    """Whether a MySQL/MariaDB server's greeting (its first packet, Protocol::HandshakeV10:
    a 4-byte header, protocol version 10, the server's version ending in NUL, a 4-byte
    connection id, 8 bytes of salt, a filler byte, the capability flags' low 2 bytes)
    sets CLIENT_SSL; None when `greeting` is not such a packet read whole."""
    from pymysql.constants import CLIENT

    size = int.from_bytes(greeting[:3], "little")
    payload = greeting[4:4 + size]
    if len(greeting) < 4 or len(payload) < size or not payload or payload[0] != 10:
        return None
    flags_at = payload.find(b"\0", 1) + 1 + 4 + 8 + 1
    if flags_at <= 14 or flags_at + 2 > size:
        return None
    return bool(int.from_bytes(payload[flags_at:flags_at + 2], "little") & CLIENT.SSL)


def _in_transaction(conn: Any) -> bool:
    """Whether a COMMIT or ROLLBACK on `conn` has anything to end: not in autocommit mode,
    or the server's last answer said a transaction is open."""
    from pymysql.constants import SERVER_STATUS

    return not conn.get_autocommit() \
        or bool(conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS)


@cache
def _connection_class() -> type:
    """PyMySQL's `Connection`, whose `commit()` and `rollback()` in autocommit mode send
    nothing when no transaction is open (imported when a connection first opens)."""
    from pymysql.connections import Connection as PyMySQLConnection

    class Connection(PyMySQLConnection):
        """PyMySQL's connection whose `commit()` and `rollback()` in autocommit mode send
        nothing when the server's last answer said no transaction is open (PyMySQL sends
        COMMIT / ROLLBACK anyway: a round trip for nothing; SQLAlchemy calls them around
        every use of a connection)."""

        def commit(self) -> None:
            """PyMySQL's `commit()` when a transaction may be open; else nothing."""
            if _in_transaction(self):
                super().commit()

        def rollback(self) -> None:
            """PyMySQL's `rollback()` when a transaction may be open; else nothing."""
            if _in_transaction(self):
                super().rollback()

    return Connection
