"""The job processes' fork server, forked from the worker instead of started anew.

multiprocessing's fork server is a new interpreter (`exec`): it imports the engine and
the handlers once more, ~0.4 s of CPU — on two cores the other core's whole start-up, and
with `--processes 2` two of them compete with the worker processes for both cores.
`cronjobs worker` has imported all of that and loaded its handlers before it starts a
thread or connects, so it forks the fork server from its own process at that moment
instead: it starts in milliseconds, and it and its job processes share the worker's pages
(those the worker writes afterwards become the worker's own copies).

The forked process builds the App of the environment's settings (`jobprocess.preload`,
as the stock fork server does: a job process running with an App of its fork server's
writes fewer pages than one running with the worker's) and runs multiprocessing's own loop
(`multiprocessing.forkserver.main`, unchanged), so job processes are started, passed their
pipes and reaped exactly as from the stock fork server, and it ends as the stock one does
(when the worker's end of its pipe closes; `runner.stop_fork_server` after the job
processes sat idle). Only how it begins differs. A fork server needed again later, when the
worker runs threads, is the stock one. This relies on the layout of
`multiprocessing.forkserver` of Python 3.11 to 3.13 (3.14 adds an authentication key):
elsewhere `fork_fork_server()` does nothing and the caller starts the stock one.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading

__all__ = ["fork_fork_server"]


def fork_fork_server() -> bool:
    """Fork this process into the fork server of its job processes, and return at once.

    Call it after the imports the job processes need and before any thread starts: the
    fork server is a copy of this process at this moment. It builds the App of the
    environment's settings and serves multiprocessing's fork requests until this process
    ends or stops it. multiprocessing's resource tracker is made sure of first, as for the
    stock fork server (the stand-in of `runner.skip_resource_tracker`, which
    `start_fork_server` sets, starts nothing).

    Returns:
        True when the fork server was forked; False when it was not (another thread runs,
        a fork server runs already, or this Python's multiprocessing differs from the
        layout this relies on): start the stock one instead.
    """
    from multiprocessing import forkserver, resource_tracker

    server = forkserver._forkserver
    if threading.active_count() != 1 or not _known_layout(server) \
            or server._forkserver_pid is not None:
        return False
    resource_tracker.ensure_running()
    gc.freeze()  # its collector (and the job processes') never copies these pages
    # No lock is held across the fork (this process runs one thread): a lock copied while
    # held would stay held in the fork server and its job processes.
    listener, address = _listener()
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(listener, alive_r, alive_w)
    os.close(alive_r)
    listener.close()
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_w
    server._forkserver_pid = pid
    return True


def _known_layout(server) -> bool:
    return (3, 11) <= sys.version_info[:2] <= (3, 13) and all(
        hasattr(server, name) for name in
        ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid"))


def _listener():
    """A listening Unix socket at a new address, as `ForkServer.ensure_running` makes it."""
    import socket
    from multiprocessing import connection, util

    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    if not util.is_abstract_socket_namespace(address):
        os.chmod(address, 0o600)
    listener.listen()
    return listener, address


def _child(listener, alive_r: int, alive_w: int) -> None:
    """The forked fork server: a new interpreter's signal handlers (multiprocessing passes
    them on to the job processes), the App, multiprocessing's loop; then it exits without
    running anything of the worker's (`os._exit`)."""
    code = 0
    try:
        from multiprocessing import forkserver

        from .jobprocess import name_process, preload

        os.close(alive_w)
        name_process("cj-forkserver")
        signal.set_wakeup_fd(-1)
        for signum in signal.valid_signals():
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # Its command line is the worker's: `pkill -f 'cronjobs worker'` must not end it
        # (and with it the jobs the worker lets finish). It ends with the worker.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        preload()
        forkserver.main(listener.detach(), alive_r, [])
    except SystemExit as exc:  # how multiprocessing's loop ends
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException:
        code = 1
        sys.excepthook(*sys.exc_info())
    finally:
        sys.stderr.flush()
        os._exit(code)
