"""PyMySQL through its public options: without TLS options, a connection gets TLS when the
server's greeting offers it, with one context per process (none built for a server that
offers none); a URL's TLS options make one context per process too; a unix socket opens
without TLS; in autocommit mode no COMMIT/ROLLBACK is sent outside a transaction. A process
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
from cronjobs.store.engines import make_engine
from cronjobs.store.models import cronjob_queue
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
    import that dialect's package in every process (`cronjobs.store.models`)."""
    assert _run(DIALECTS.format(url=url)).split("\n")[0] == str([dialect])


# PyMySQL 1.2's PREFERRED mode (no TLS option) builds a TLS context, the CA bundle loaded,
# for every connection, also to a server offering no TLS: here the server's greeting says
# whether it offers TLS, and one context serves the process's connections.

def test_a_connection_to_a_server_without_tls_builds_no_tls_context(monkeypatch):
    import ssl

    from cronjobs.store.engines import make_engine

    built = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context",
                        lambda *a, **k: built.append(1) or real(*a, **k))
    engine = make_engine(MARIADB + "/test", pool_size=0)  # the test server offers no TLS
    for _ in range(3):
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
            raw = conn.connection.dbapi_connection
            assert raw.ssl is False and raw.get_host_info().startswith("socket 127.0.0.1:")
    engine.dispose()
    assert built == []


def _greeting(ssl_offered: bool) -> bytes:
    """A MariaDB-like greeting packet (Protocol::HandshakeV10), with or without CLIENT_SSL."""
    from pymysql.constants import CLIENT

    flags = CLIENT.PROTOCOL_41 | CLIENT.SECURE_CONNECTION | CLIENT.PLUGIN_AUTH \
        | CLIENT.LONG_PASSWORD | (CLIENT.SSL if ssl_offered else 0)
    payload = (b"\x0a" + b"5.5.5-10.11.0-fake\0" + (7).to_bytes(4, "little") + b"s" * 8
               + b"\0" + (flags & 0xFFFF).to_bytes(2, "little") + b"\x2d" + b"\x00\x00"
               + (flags >> 16).to_bytes(2, "little") + b"\x15" + b"\0" * 10 + b"t" * 12
               + b"\0" + b"mysql_native_password\0")
    return len(payload).to_bytes(3, "little") + b"\0" + payload


def test_the_greeting_says_whether_the_server_offers_tls():
    from cronjobs.store.drivers import offers_tls

    assert offers_tls(_greeting(True)) is True and offers_tls(_greeting(False)) is False
    error = b"\xff\x69\x04Host is blocked"  # an error packet instead of a greeting
    for unreadable in (b"", _greeting(True)[:20],
                       len(error).to_bytes(3, "little") + b"\0" + error):
        assert offers_tls(unreadable) is None


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


def _mysql_server(tmp_path, connections: int):
    """A fake MySQL server on a free local port that offers TLS, upgrades to it (a
    self-signed certificate), accepts any login and answers OK to every command;
    (port, thread, the TLS versions of the connections it served)."""
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
    versions: list[str] = []

    def packet(sock) -> tuple[int, bytes]:
        head = b""
        while len(head) < 4:
            more = sock.recv(4 - len(head))
            if not more:
                return 0, b""
            head += more
        size, body = int.from_bytes(head[:3], "little"), b""
        while len(body) < size:
            body += sock.recv(size - len(body))
        return head[3], body

    def ok(sock, seq: int) -> None:
        sock.sendall(b"\x07\x00\x00" + bytes([seq]) + b"\x00\x00\x00\x02\x00\x00\x00")

    def serve():
        with listener:
            for _ in range(connections):
                raw, _ = listener.accept()
                raw.sendall(_greeting(True))
                packet(raw)  # the client's SSL request
                with context.wrap_socket(raw, server_side=True) as tls:
                    versions.append(tls.version())
                    seq, _login = packet(tls)
                    ok(tls, seq + 1)
                    while True:
                        seq, command = packet(tls)
                        if not command or command[:1] == b"\x01":  # closed, COM_QUIT
                            break
                        ok(tls, seq + 1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, versions


def test_a_server_offering_tls_gets_it_with_one_context_shared_by_the_connections(
        tmp_path, monkeypatch):
    import ssl

    from cronjobs.store import drivers

    built = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context",
                        lambda *a, **k: built.append(1) or real(*a, **k))
    monkeypatch.setattr(drivers, "_contexts", {})
    port, server, versions = _mysql_server(tmp_path, connections=2)
    contexts = set()
    for _ in range(2):
        conn = drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "port": port,
                                                          "user": "root"})
        contexts.add(id(conn.ctx))
        conn.close()
    server.join(10)
    assert [v.startswith("TLS") for v in versions] == [True, True]
    assert len(contexts) == 1 and len(built) == 1  # one context, built once
    context = drivers.shared_context({})  # PyMySQL's PREFERRED settings: no verification
    assert id(context) in contexts
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


def test_the_urls_tls_options_make_one_context_shared_by_the_connections(tmp_path):
    import socket
    import ssl

    from cronjobs.store import drivers

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
    from cronjobs.errors import ConfigError
    from cronjobs.store import drivers

    with pytest.raises(ConfigError, match="TLS settings cannot be used"):
        drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "defer_connect": True,
                                                   "ssl": {"ca": str(tmp_path / "none.pem")}})


def test_tls_arguments_keep_pymysqls_meaning_in_a_shared_context():
    import ssl

    from cronjobs.store import drivers

    conn = drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "defer_connect": True,
                                                      "ssl_verify_cert": True})
    assert isinstance(conn.ctx, ssl.SSLContext) and conn.ssl
    assert conn.ctx.verify_mode == ssl.CERT_REQUIRED and not conn.ctx.check_hostname
    assert drivers.tls_arguments({"host": "h", "unix_socket": "/run/mysqld/mysqld.sock"}) \
        == {"host": "h", "unix_socket": "/run/mysqld/mysqld.sock", "ssl_disabled": True}
    assert drivers.tls_arguments({"host": "db.example.com"}) == {"host": "db.example.com"}
    again = drivers.connect_pymysql(None, None, [], {"host": "127.0.0.1", "defer_connect": True,
                                                       "ssl_verify_cert": True})
    assert again.ctx is conn.ctx


def test_in_autocommit_mode_commit_and_rollback_are_sent_only_inside_a_transaction():
    from cronjobs.store import drivers

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
