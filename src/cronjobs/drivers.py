"""Database drivers loaded for what a process uses: PyMySQL without `cryptography` until a
server asks for RSA password exchange.

PyMySQL imports `cryptography` when it is imported, for one purpose: encrypting the
password with the server's RSA key (MySQL's `sha256_password` and `caching_sha2_password`
over a connection without TLS). MariaDB never asks for it (its `mysql_native_password` and
`ed25519` need no RSA), yet the import costs every process ~8 MB of PSS (the worker, its
fork server, every job process's share) and ~40 ms. `import_pymysql()` imports PyMySQL with
that import held back and wraps `pymysql._auth.sha2_rsa_encrypt`, the only function that
uses it: its first call imports `cryptography` then, fills in the names PyMySQL would have
imported, and runs PyMySQL's own function. Nothing else of PyMySQL changes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

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
