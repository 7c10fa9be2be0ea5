"""Database drivers loaded for what a process uses: PyMySQL without `cryptography` until a
server asks for RSA password exchange.

PyMySQL imports `cryptography` when it is imported, for one purpose: encrypting the
password with the server's RSA key (MySQL's `sha256_password` and `caching_sha2_password`
over a connection without TLS). MariaDB never asks for it (its `mysql_native_password` and
`ed25519` need no RSA), yet the import costs every process PSS and start-up time (the
worker, its fork server, every job process's share; figures in bench/NOTES.md).
`import_pymysql()` imports PyMySQL with that import held back and wraps
`pymysql._auth.sha2_rsa_encrypt`, the only function that uses it: its first call imports
`cryptography` then, fills in the names PyMySQL would have imported, and runs PyMySQL's
own function.

PyMySQL 1.2 tries TLS whenever the server offers it ("PREFERRED", no `ssl_*` option
given) and so builds a TLS context, loading the system's CA bundle, for every connection
it opens, also when the server offers no TLS: many times the CPU of the rest of a local
connection (bench/NOTES.md). `connect_pymysql` (the engine's `do_connect` listener) opens
PyMySQL's connections with that context built when a server first offers TLS, by PyMySQL,
and shared by the process's later connections; a connection given `ssl_*` options or an
`ssl` context builds its own, as PyMySQL does. The same connections, in autocommit mode
(`App.autocommit_engine`), send no COMMIT or ROLLBACK when the server's last answer said no
transaction is open: PyMySQL sends them anyway, and SQLAlchemy calls them around every use.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

_HAZMAT = "cryptography.hazmat"
# The names pymysql._auth imports from cryptography, as (module, name).
_RSA_NAMES = (("cryptography.hazmat.backends", "default_backend"),
              ("cryptography.hazmat.primitives", "hashes"),
              ("cryptography.hazmat.primitives", "serialization"),
              ("cryptography.hazmat.primitives.asymmetric", "padding"))


def import_pymysql() -> None:
    """Import PyMySQL (as `make_engine` does before a `mysql+pymysql` engine) with its
    `cryptography` import deferred to the first RSA password exchange.

    Does nothing when PyMySQL is imported already, when `cryptography.hazmat` is, or when
    PyMySQL's `_auth` module does not look as expected (another version): PyMySQL is then
    imported as it is. Raises ImportError only when PyMySQL itself is missing.
    """
    if "pymysql" in sys.modules or _HAZMAT in sys.modules:
        return
    # The package itself is cheap (redis-py imports it to see whether it is installed);
    # its `hazmat` subpackage is what loads OpenSSL.
    sys.modules[_HAZMAT] = None  # type: ignore[assignment]  # its import fails now
    try:
        from pymysql import _auth
    finally:
        if sys.modules.get(_HAZMAT, 0) is None:
            del sys.modules[_HAZMAT]
    original = getattr(_auth, "sha2_rsa_encrypt", None)
    if original is None or getattr(_auth, "_have_cryptography", None) is not False:
        return
    _auth.sha2_rsa_encrypt = _loading_first(_auth, original)


def _loading_first(auth, original: Callable) -> Callable:
    """`original` (PyMySQL's `sha2_rsa_encrypt`), after importing what it needs into
    `auth`; without `cryptography` installed, PyMySQL's own error is raised."""
    def sha2_rsa_encrypt(password: bytes, salt: bytes, public_key: bytes) -> bytes:
        import importlib

        try:
            for module, name in _RSA_NAMES:
                setattr(auth, name, getattr(importlib.import_module(module), name))
            auth._have_cryptography = True
        except ImportError:
            pass  # PyMySQL raises its "'cryptography' package is required" error
        auth.sha2_rsa_encrypt = original
        return original(password, salt, public_key)

    return sha2_rsa_encrypt


_PREFERRED_TLS: list = []  # the one context of PREFERRED connections, once built
_PREFERRED_LOCK = threading.Lock()


def connect_pymysql(_dialect: Any, _record: Any, cargs: list, cparams: dict) -> Any:
    """SQLAlchemy `do_connect` listener: a PyMySQL connection opened with `cargs` and
    `cparams` (what the URL and `connect_args` give) whose PREFERRED-mode TLS context is
    built only when a server offers TLS, once per process.

    Raises:
        ConfigError: the TLS files the URL names cannot be read (`ssl_ca=...`, `ssl_cert=...`;
            PyMySQL raises the `OSError` of `ssl` while it sets up, before it connects).
        What `pymysql.connect` raises otherwise (its errors are the DBAPI's).
    """
    try:
        return _connection_class()(*cargs, **cparams)
    except OSError as exc:  # socket errors come as PyMySQL's OperationalError, not here
        from .errors import ConfigError

        raise ConfigError(f"the database URL's TLS settings cannot be used: {exc}") from None


@cache
def _connection_class() -> type:
    """`pymysql.connections.Connection`, whose `_create_ssl_ctx({})` (PREFERRED mode: no
    `ssl_*` option) gives a `_PreferredTls` instead of a new context, and whose `commit()`
    and `rollback()` in autocommit mode send nothing when the server's last answer said no
    transaction is open (PyMySQL sends COMMIT / ROLLBACK anyway: a round trip for nothing;
    SQLAlchemy calls them around every use of a connection), and whose handshake gives up
    after `connect_timeout` when no `read_timeout` is set."""
    from pymysql.connections import Connection
    from pymysql.constants import SERVER_STATUS

    class PreferredTlsConnection(Connection):
        def connect(self, sock=None):
            # PyMySQL reads the server's greeting and the authentication with its
            # read_timeout, None unless given: a server that accepts and never answers
            # held every command forever. The handshake is bounded by connect_timeout
            # (PyMySQL's default 10 s, or the URL's); later reads keep the read_timeout.
            if self._read_timeout is not None or self.connect_timeout is None:
                return super().connect(sock)
            self._read_timeout = self.connect_timeout
            try:
                super().connect(sock)
            finally:
                self._read_timeout = None
            self._sock.settimeout(None)
            self._current_timeout = None

        def _create_ssl_ctx(self, sslp):
            if isinstance(sslp, dict) and not sslp:
                return _PreferredTls(super()._create_ssl_ctx)
            return super()._create_ssl_ctx(sslp)

        def commit(self):
            if not self._no_transaction():
                super().commit()

        def rollback(self):
            if not self._no_transaction():
                super().rollback()

        def _no_transaction(self) -> bool:
            # autocommit mode, and the server's last answer said no transaction is open
            return self.get_autocommit() \
                and not self.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS

    return PreferredTlsConnection


class _PreferredTls:
    """Stands in for PyMySQL's PREFERRED-mode context, which PyMySQL uses only to wrap the
    socket of a server that offers TLS: the context is built then, by PyMySQL's own
    `_create_ssl_ctx({})`, and shared by every later connection of the process."""

    def __init__(self, create: Callable[[dict], Any]) -> None:
        self._create = create

    def wrap_socket(self, sock: Any, **kwargs: Any) -> Any:
        with _PREFERRED_LOCK:
            if not _PREFERRED_TLS:
                _PREFERRED_TLS.append(self._create({}))
            context = _PREFERRED_TLS[0]
        return context.wrap_socket(sock, **kwargs)
