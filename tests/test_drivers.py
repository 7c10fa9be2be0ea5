"""PyMySQL through its public options: a connection to this machine without TLS options
opens without TLS (no context built); a URL's TLS options make one context per process,
shared by its connections; a remote server named without them gets PyMySQL's PREFERRED
mode; in autocommit mode no COMMIT/ROLLBACK is sent outside a transaction. A process
imports the SQLAlchemy dialect of its own database only (each such check runs in a new
interpreter, where nothing has imported it yet)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import MARIADB, POSTGRES


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


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


# PyMySQL 1.2's PREFERRED mode (no TLS option) builds a TLS context, the CA bundle loaded,
# for every connection, also to a server offering no TLS.

def test_a_local_connection_without_tls_options_builds_no_tls_context(monkeypatch):
    import ssl

    from cronjobs.engines import make_engine

    built = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context",
                        lambda *a, **k: built.append(1) or real(*a, **k))
    engine = make_engine(MARIADB + "/test", pool_size=0)  # 127.0.0.1
    for _ in range(3):
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
            assert conn.connection.dbapi_connection.ssl is False  # ssl_disabled
    engine.dispose()
    assert built == []


def test_a_remote_server_without_tls_options_gets_pymysqls_preferred_mode():
    import ssl

    from cronjobs import drivers

    assert drivers.tls_arguments({"host": "db.example.com"}) == {"host": "db.example.com"}
    conn = drivers.connect_pymysql(None, None, [], {"host": "192.0.2.1", "defer_connect": True})
    assert conn.ssl and isinstance(conn.ctx, ssl.SSLContext)  # PyMySQL's own context
    for local in ({"host": "127.0.0.1"}, {"host": "::1"}, {"host": "localhost"}, {},
                  {"host": "db", "unix_socket": "/run/mysqld/mysqld.sock"}):
        assert drivers.tls_arguments(local)["ssl_disabled"] is True, local
    assert "ssl_disabled" not in drivers.tls_arguments({"host": "127.0.0.1",
                                                        "ssl_verify_cert": True})


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


def test_the_urls_tls_options_make_one_context_shared_by_the_connections(tmp_path):
    import socket
    import ssl

    from cronjobs import drivers

    port, server = _tls_server(tmp_path, connections=2)
    contexts = set()
    for _ in range(2):  # ?ssl_check_hostname=false: SQLAlchemy's `ssl` dict, a local server
        conn = drivers.connect_pymysql(None, None, [], {
            "host": "127.0.0.1", "port": port, "defer_connect": True,
            "ssl": {"check_hostname": False}})
        assert conn.ssl and isinstance(conn.ctx, ssl.SSLContext)
        with conn.ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                  server_hostname="127.0.0.1") as tls:
            assert tls.recv(5) == b"hello" and tls.version().startswith("TLS")
            contexts.add(id(tls.context))
    server.join(10)
    assert len(contexts) == 1  # one context: built once, shared
    context = drivers.shared_context({"check_hostname": False})
    assert id(context) in contexts  # PyMySQL's meaning: no CA given, no verification
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


def test_unreadable_tls_files_are_a_config_error(tmp_path):
    from cronjobs import drivers
    from cronjobs.errors import ConfigError

    with pytest.raises(ConfigError, match="TLS settings cannot be used"):
        drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "defer_connect": True,
                                                   "ssl": {"ca": str(tmp_path / "none.pem")}})


def test_tls_arguments_keep_pymysqls_meaning_in_a_shared_context():
    import ssl

    from cronjobs import drivers

    conn = drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "defer_connect": True,
                                                      "ssl_verify_cert": True})
    assert isinstance(conn.ctx, ssl.SSLContext) and conn.ssl
    assert conn.ctx.verify_mode == ssl.CERT_REQUIRED and not conn.ctx.check_hostname
    again = drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "defer_connect": True,
                                                       "ssl_verify_cert": True})
    assert again.ctx is conn.ctx


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
