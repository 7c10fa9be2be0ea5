"""PyMySQL is loaded without `cryptography` (MariaDB never needs it), and its RSA password
exchange still works: the first call imports `cryptography` then. A process imports the
SQLAlchemy dialect of its own database only. Each check runs in a new interpreter, where
nothing has imported either yet."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import MARIADB, POSTGRES

PROBE = f"""
import sys
import redis  # imports the cryptography package (cheap) to see whether it is installed
from cronjobs.engines import make_engine
engine = make_engine({MARIADB + "/test"!r})
with engine.connect() as conn:
    assert conn.exec_driver_sql("SELECT 1").scalar() == 1
print("cryptography loaded:", "cryptography.hazmat" in sys.modules)
"""

RSA = f"""
import os, sys
from cronjobs.engines import make_engine
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


# The tables, an engine, a query compiled for it and one run: the dialects imported.
DIALECTS = """
import sys
import sqlalchemy as sa
from cronjobs.engines import make_engine
from cronjobs.models import cronjob_queue
engine = make_engine({url!r})
sa.select(cronjob_queue).compile(dialect=engine.dialect)
with engine.connect() as conn:
    conn.execute(sa.text("SELECT 1"))
print(sorted({{m.split(".")[2] for m in sys.modules if m.startswith("sqlalchemy.dialects.")
              and m.count(".") >= 2 and not m.split(".")[2].startswith("_")}}))
"""


@pytest.mark.parametrize(("url", "dialect"), [
    ("sqlite://", "sqlite"), (MARIADB + "/test", "mysql"), (POSTGRES + "/test", "postgresql")])
def test_a_process_imports_its_own_database_dialect_only(url, dialect):
    """The tables declare MySQL's types and no dialect's CREATE TABLE options, which would
    import that dialect's package in every process (`cronjobs.models`)."""
    assert _run(DIALECTS.format(url=url)).split("\n")[0] == str([dialect])


# PyMySQL 1.2's PREFERRED mode (no `ssl_*` option): TLS when the server offers it. Its
# context (the CA bundle loaded, ~18 ms of CPU) is built when a server offers TLS, once.

def test_a_connection_to_a_server_without_tls_builds_no_tls_context(monkeypatch):
    import ssl

    from cronjobs import drivers
    from cronjobs.engines import make_engine

    built = []
    monkeypatch.setattr(drivers, "_PREFERRED_TLS", [])
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context",
                        lambda *a, **k: built.append(1) or real(*a, **k))
    engine = make_engine(MARIADB + "/test", pool_size=0)  # the test server offers no TLS
    for _ in range(3):
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
            assert isinstance(conn.connection.dbapi_connection.ctx, drivers._PreferredTls)
    engine.dispose()
    assert built == [] and drivers._PREFERRED_TLS == []


def _tls_server(tmp_path, connections: int):
    """A TLS server on a free local port (a self-signed certificate) that completes
    `connections` handshakes; (port, thread)."""
    import socket
    import ssl
    import threading

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        with listener:
            for _ in range(connections):
                sock, _ = listener.accept()
                with context.wrap_socket(sock, server_side=True) as tls:
                    tls.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_a_server_offering_tls_gets_it_with_one_context_shared_by_the_connections(
        tmp_path, monkeypatch):
    import socket
    import ssl

    from cronjobs import drivers

    monkeypatch.setattr(drivers, "_PREFERRED_TLS", [])
    port, server = _tls_server(tmp_path, connections=2)
    contexts = set()
    for _ in range(2):
        conn = drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "port": port,
                                                          "defer_connect": True})
        assert conn.ssl and not conn._ssl_required  # PREFERRED, as PyMySQL's own
        with conn.ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                  server_hostname="127.0.0.1") as tls:
            assert tls.recv(5) == b"hello" and tls.version().startswith("TLS")
            contexts.add(id(tls.context))
    server.join(10)
    assert len(contexts) == 1 and len(drivers._PREFERRED_TLS) == 1
    context = drivers._PREFERRED_TLS[0]  # PyMySQL's PREFERRED settings: no verification
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


def test_a_connection_given_tls_options_builds_its_own_context_as_pymysql_does():
    import ssl

    from cronjobs import drivers

    conn = drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "defer_connect": True,
                                                      "ssl_verify_cert": True})
    assert isinstance(conn.ctx, ssl.SSLContext) and conn._ssl_required
    assert conn.ctx.verify_mode == ssl.CERT_REQUIRED


def test_in_autocommit_mode_commit_and_rollback_are_sent_only_inside_a_transaction():
    from cronjobs import drivers

    conn = drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "user": "root",
                                                      "database": "test", "autocommit": True})
    cur = conn.cursor()

    def sent() -> dict:
        cur.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Com_commit', 'Com_rollback')")
        return {name: int(value) for name, value in cur.fetchall()}

    try:
        cur.execute("CREATE TEMPORARY TABLE t (n INT) ENGINE=InnoDB")
        before = sent()
        cur.execute("INSERT INTO t VALUES (1)")  # commits itself
        conn.commit()
        conn.rollback()
        assert sent() == before, "no transaction open: nothing sent"
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (2)")
        conn.rollback()  # a transaction is open: sent
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (3)")
        conn.commit()
        assert sent() == {"Com_commit": before["Com_commit"] + 1,
                          "Com_rollback": before["Com_rollback"] + 1}
        cur.execute("SELECT n FROM t ORDER BY n")
        assert [r[0] for r in cur.fetchall()] == [1, 3]
    finally:
        conn.close()
