"""The job processes' fork server: one preloaded process that forks a job process on request.

The worker holds one end of a Unix socket pair (`ForkServer`), the fork server the other
(`serve`). To start a job process the worker sends one byte and, with it, the job process's
end of its pipe (`socket.send_fds`); the fork server `os.fork()`s, hands the child that
descriptor, closes its own copy and answers with the child's pid. It reaps its children
and sends each one's exit status (as `subprocess` gives it: `-N` for signal N) when it
comes. The worker may `os.kill` a pid it was told (MAX_RUNTIME); what a job process does
is `child_main`'s business (`jobprocess.run_process`).

The fork server is single-threaded, so forking it is safe (forking the threaded worker
would not be). It is either forked from the worker before the worker starts a thread
(`ForkServer.fork`: no second import, the worker's pages shared), or started fresh as
`python -m cronjobs.worker.preload` (`ForkServer.spawn`), which can be done at any time. It ends
when the worker's end of the socket closes (the worker stopped it, ended, or was killed):
its job processes die with it (`PR_SET_PDEATHSIG`, set by each job process). It ignores
SIGINT and SIGTERM (a Ctrl-C or `pkill -f 'cronjobs worker'` is the worker's to handle).
Only the standard library's public API is used here.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["Child", "ForkServer", "ServerGone", "serve"]

REPORT = struct.Struct("!cii")  # b"P", pid, 0: forked; b"X", pid, exit status: ended
ChildMain = Callable[[int, int], int]  # (pipe descriptor, fork server's pid) -> exit code


class ServerGone(OSError):
    """The fork server has ended (killed, or its start failed): no process can be forked."""


class ForkServer:
    """The worker's end of a running fork server. Thread-safe.

    Made by `fork` or `spawn`; `start_child` forks a job process, `stop` ends the server.
    """

    def __init__(self, sock: socket.socket, pid: int,
                 popen: subprocess.Popen | None = None) -> None:
        self.pid = pid
        self._sock, self._popen = sock, popen
        self._lock = threading.Lock()
        self._buffer = b""
        self._forked: list[int] = []  # pids reported forked, in order (one asked at a time)
        self._exits: dict[int, int] = {}  # pid -> exit status, reported and not yet taken
        self._gone = False

    @classmethod
    def fork(cls, run: Callable[[socket.socket], None]) -> ForkServer | None:
        """Fork the fork server from this process, and return at once.

        Call it before this process starts a thread: the fork server is a copy of this
        process at this moment (a lock held by another thread would stay held in it).

        Args:
            run: what the fork server runs on its end of the socket (the preload, then
                `serve`); it exits when that returns.

        Returns:
            The running fork server, or None when another thread runs (start one with
            `spawn` instead).
        """
        if threading.active_count() != 1:
            return None
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the fork server: never returns into the worker's code
            code = 1
            try:
                mine.close()
                _default_signals()
                run(theirs)
                code = 0
            except BaseException:
                sys.excepthook(*sys.exc_info())
            finally:
                _flush()
                os._exit(code)
        theirs.close()
        return cls(mine, pid)

    @classmethod
    def spawn(cls, module: str) -> ForkServer:
        """Start the fork server fresh, `python -m module FD` with this process's
        `sys.path`, and return at once (it preloads meanwhile: the first `start_child`
        waits for it). Safe in a process that runs threads. `module` calls `serve` on the
        socket descriptor FD."""
        mine, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        try:
            popen = subprocess.Popen([sys.executable, "-m", module, str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), env=env,
                                     stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        return cls(mine, popen.pid, popen)

    def start_child(self, fd: int, timeout_seconds: float) -> int:
        """Fork a job process that is handed the descriptor `fd` (the caller closes its
        own copy); returns its pid.

        Raises:
            ServerGone: the fork server has ended, or did not answer within
                `timeout_seconds` (it is stopped then).
        """
        with self._lock:
            if self._gone:
                raise ServerGone("the fork server has ended")
            try:
                socket.send_fds(self._sock, [b"F"], [fd])
            except OSError as exc:
                self._lost()
                raise ServerGone(f"the fork server has ended ({exc})") from exc
            deadline = time.monotonic() + timeout_seconds
            while not self._forked:
                if not self._read(deadline - time.monotonic()):
                    if self._gone:
                        raise ServerGone("the fork server has ended")
                    self._lost(kill=True)
                    raise ServerGone(f"the fork server did not fork within "
                                     f"{timeout_seconds:g} s")
            return self._forked.pop(0)

    def exit_status(self, pid: int, timeout_seconds: float = 0.0) -> int | None:
        """The exit status of child `pid` (`-N`: killed by signal N), waiting up to
        `timeout_seconds` for it; None while it runs. Once the fork server has ended, a
        child not reported ended is `-SIGKILL` (it died with the server). Taken once:
        the caller keeps it (`Child`)."""
        deadline = time.monotonic() + timeout_seconds
        with self._lock:
            self._read(0)
            while pid not in self._exits and not self._gone:
                if not self._read(deadline - time.monotonic()):
                    break
            if pid in self._exits:
                return self._exits.pop(pid)
            return -signal.SIGKILL if self._gone else None

    def alive(self) -> bool:
        """Whether the fork server still serves (reads what it reported meanwhile)."""
        with self._lock:
            self._read(0)
            return not self._gone

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """End the fork server (its job processes die with it) and reap it; killed if it
        has not ended within `timeout_seconds`."""
        with self._lock:
            if self._gone:  # ended already, and reaped
                return
            self._gone = True
            self._sock.close()
        if self._popen is not None:
            try:
                self._popen.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait()
            return
        deadline = time.monotonic() + timeout_seconds
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return
            time.sleep(0.01)

    def _read(self, timeout_seconds: float) -> bool:
        """Read what the fork server sent within `timeout_seconds` (>= 0; lock held);
        False when nothing came (or it has ended)."""
        if self._gone:
            return False
        poll = select.poll()
        poll.register(self._sock, select.POLLIN)
        if not poll.poll(max(timeout_seconds, 0) * 1000):
            return False
        data = self._sock.recv(65536)
        if not data:
            self._lost()
            return False
        self._buffer += data
        whole = len(self._buffer) - len(self._buffer) % REPORT.size
        for kind, pid, status in REPORT.iter_unpack(self._buffer[:whole]):
            if kind == b"P":
                self._forked.append(pid)
            else:
                self._exits[pid] = status
        self._buffer = self._buffer[whole:]
        return True

    def _lost(self, kill: bool = False) -> None:
        """The fork server has ended (or, `kill`, is killed now): reap it."""
        self._gone = True
        self._sock.close()
        if kill:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._popen is not None:
            self._popen.wait()
        else:
            os.waitpid(self.pid, 0)


class Child:
    """A process the fork server forked: its pid, exit code, kill and join."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.pid, self._server = pid, server
        self._exitcode: int | None = None

    @property
    def exitcode(self) -> int | None:
        """Its exit status (`-N`: killed by signal N); None while it runs."""
        if self._exitcode is None:
            self._exitcode = self._server.exit_status(self.pid)
        return self._exitcode

    def is_alive(self) -> bool:
        """Whether it runs."""
        return self.exitcode is None

    def join(self, timeout_seconds: float | None = None) -> None:
        """Wait up to `timeout_seconds` (None: 1 day) for it to end."""
        if self._exitcode is None:
            wait = 86400.0 if timeout_seconds is None else timeout_seconds
            self._exitcode = self._server.exit_status(self.pid, wait)

    def kill(self) -> None:
        """SIGKILL it, unless it has ended."""
        if self.is_alive():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def serve(sock: socket.socket, child_main: ChildMain) -> None:
    """The fork server's loop: fork a child per request on `sock` and report its pid, reap
    the children and report their exit statuses; returns when the worker's end closes.

    Each child runs `child_main(fd, server_pid)` with the descriptor it was sent, then
    ends with `os._exit` of what it returned (1 if it raised).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server_pid = os.getpid()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes select via wake_w
    try:
        while True:
            ready, _, _ = select.select([sock, wake_r], [], [])
            if wake_r in ready:
                os.read(wake_r, 4096)
                _reap(sock)
            if sock in ready:
                request, fds, _, _ = socket.recv_fds(sock, 1, 1)
                if not request:  # the worker's end closed
                    return
                if not fds:
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(sock, (wake_r, wake_w), fds[0], server_pid, child_main)
                os.close(fds[0])
                sock.sendall(REPORT.pack(b"P", pid, 0))
    except BrokenPipeError:  # the worker has ended
        return
    finally:
        signal.set_wakeup_fd(-1)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.sendall(REPORT.pack(b"X", pid, os.waitstatus_to_exitcode(status)))


def _child(sock: socket.socket, wake: tuple[int, int], fd: int, server_pid: int,
           child_main: ChildMain) -> None:
    """In a child just forked: the fork server's SIGCHLD handler and descriptors undone
    (SIGINT and SIGTERM stay ignored), then `child_main`; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for end in wake:
            os.close(end)
        code = child_main(fd, server_pid)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
    finally:
        _flush()
        os._exit(code)


def _default_signals() -> None:
    """In the fork server forked from the worker: none of the worker's signal handlers."""
    signal.set_wakeup_fd(-1)
    for signum in signal.valid_signals():
        if callable(signal.getsignal(signum)):
            signal.signal(signum, signal.SIG_DFL)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError, OSError):
            pass
