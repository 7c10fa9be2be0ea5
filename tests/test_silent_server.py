"""A database server that accepts connections and never answers (a hung server, a wrong
port on a proxy): connecting gives up after the connect timeout, once, and every CLI
command ends with a one-line "database unavailable" error instead of waiting forever.

Before, PyMySQL read the server's greeting with no timeout at all, libpq waited forever,
and PyMySQL's timeout, once there, read as a dropped pooled connection that
`run_in_transaction` tried again at once, 8 times."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from conftest import cli_env, run_cli
from cronjobs.errors import DatabaseUnavailable
from cronjobs.store.db import run_in_transaction
from cronjobs.store.engines import CONNECT_TIMEOUT_SECONDS, _connect_args, make_engine


class SilentServer:
    """Accepts TCP connections on a free local port, counts them, sends nothing."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


URLS = {
    "mariadb": "mysql+pymysql://root@127.0.0.1:{port}/x?connect_timeout=2",
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:{port}/x?connect_timeout=2",
}


@pytest.mark.parametrize("backend", list(URLS))
def test_connecting_to_a_silent_server_gives_up_once_after_the_connect_timeout(backend,
                                                                               silent):
    engine = make_engine(URLS[backend].format(port=silent.port), pool_size=0)
    start = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match="^database unavailable: "):
        run_in_transaction(engine, lambda conn: conn.exec_driver_sql("SELECT 1").scalar())
    took = time.monotonic() - start
    engine.dispose()
    assert 1.5 <= took < 8, took
    assert len(silent.accepted) == 1  # not tried again as a dropped pooled connection


@pytest.mark.parametrize("backend", list(URLS))
@pytest.mark.parametrize("command", [["get", "1"], ["tick"], ["dispatch", "x.y.execute",
                                                                 "--remote"]])
def test_a_cli_command_against_a_silent_server_ends_with_one_line(backend, command, silent):
    url = URLS[backend].replace("@", ":s3cret@").format(port=silent.port)
    env = cli_env(url)
    start = time.monotonic()
    done = run_cli(command, env, timeout=40)
    took = time.monotonic() - start
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: database unavailable: "), lines
    # the database named as set, its password hidden (PyMySQL's text names no port)
    assert lines[0].endswith(f" (CRONJOBS_DATABASE_URL={url.replace('s3cret', '***')})"), lines
    assert took < 15, took


def test_postgresql_connecting_is_bounded_by_default_unless_the_url_says_otherwise():
    assert _connect_args("postgresql+psycopg://u@h/db", None) == {
        "connect_timeout": CONNECT_TIMEOUT_SECONDS}
    assert _connect_args("postgresql+psycopg://u@h/db?connect_timeout=30", None) == {}
    assert _connect_args("postgresql+psycopg://u@h/db", 3) == {"connect_timeout": 3}
    assert _connect_args("sqlite:///x.db", None) == {}


def test_pymysql_keeps_no_read_timeout_after_its_bounded_handshake():
    """The handshake's timeout is not left on the connection: a long statement of a
    worker (cleanup, a big claim) is not cut off by it."""
    from conftest import MARIADB

    engine = make_engine(MARIADB + "/test?connect_timeout=2", pool_size=0)
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw._read_timeout is None and raw._sock.gettimeout() is None
        assert conn.exec_driver_sql("SELECT SLEEP(2.5)").scalar() == 0
    engine.dispose()
