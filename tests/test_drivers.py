"""PyMySQL is loaded without `cryptography` (MariaDB never needs it), and its RSA password
exchange still works: the first call imports `cryptography` then. Each check runs in a new
interpreter, where nothing has imported either yet."""

from __future__ import annotations

import subprocess
import sys

from conftest import MARIADB

PROBE = f"""
import sys
import redis  # imports the cryptography package (cheap) to see whether it is installed
from cronjobs.db import make_engine
engine = make_engine({MARIADB + "/test"!r})
with engine.connect() as conn:
    assert conn.exec_driver_sql("SELECT 1").scalar() == 1
print("cryptography loaded:", "cryptography.hazmat" in sys.modules)
"""

RSA = f"""
import os, sys
from cronjobs.db import make_engine
make_engine({MARIADB + "/test"!r})
assert "cryptography.hazmat" not in sys.modules
from pymysql import _auth
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                    serialization.PublicFormat.SubjectPublicKeyInfo)
salt = os.urandom(20)
sealed = _auth.sha2_rsa_encrypt(b"s3cret", salt, pem)
oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(),
                    label=None)
opened = key.decrypt(sealed, oaep)
expected = bytes(b ^ salt[i % len(salt)] for i, b in enumerate(b"s3cret\\0"))
assert opened == expected, (opened, expected)
assert _auth._have_cryptography is True
print("rsa ok")
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_mariadb_engine_connects_without_importing_cryptography():
    assert "cryptography loaded: False" in _run(PROBE)


def test_the_rsa_password_exchange_imports_cryptography_on_its_first_call():
    assert "rsa ok" in _run(RSA)
