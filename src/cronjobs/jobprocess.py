"""The job process: runs one job at a time in its main thread, under a MAX_RUNTIME alarm.

Job processes are forked from a fork server that called `preload()` once (its preload list
imports `cronjobs.preload`): the engine, the registry and the built-in handlers are
imported and the App is built before any job process exists, so their pages are shared:
eight job processes cost little more memory than one. Importing this module does nothing
more (the worker imports it too). Each runs a job under `setitimer`: at
MAX_RUNTIME a SIGALRM interrupts the handler, even inside a blocked system call
(`time.sleep`, a socket read), its `finally` blocks run, the process reports `timeout` and
exits — a job process is never reused after a timeout. A handler stuck where no signal
reaches it (a C loop, SIGALRM blocked) is killed `KILL_GRACE_SECONDS` later: by its
worker with SIGKILL, and by its own kill timer (`killtimer.KillTimer`) should the worker
be frozen — the process never outlives MAX_RUNTIME + grace, whatever its worker does.

The fork server builds the App of the worker's settings once (`preloaded()`), handler
registry loaded. A job process whose worker has the same settings (the `cronjobs worker`
and `cronjobs serve` commands: both read one environment) runs every job with that App:
its pages stay shared, and every job process runs the code the fork server loaded, so a
handler file edited (or saved with a syntax error) while the worker runs changes nothing
until the worker restarts. A worker started from code with other settings gets job
processes that each build an App of their own (with its own registry) before they say
they are ready.

The process ignores SIGINT/SIGTERM (the worker decides when jobs stop) and dies with its
parent (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import importlib
import io
import os
import pickle
import pkgutil
import signal
import stat
import struct
import sys
from multiprocessing import forkserver, process, reduction, resource_tracker, spawn, util
from multiprocessing.connection import Connection

import handlers as _builtin_handlers

from . import logs
from .app import App
from .config import Settings
from .context import Runtime
from .executor import call_handler
from .handler import Job
from .killtimer import KILL_GRACE_SECONDS, KillTimer
from .killtimer import load as load_kill_timer
from .outcome import Outcome, timeout, unsendable
from .status import Reason

READY = "ready"  # what a job process sends once it can take jobs (`runner.READY` too)
# How a lean start (`runner`'s `_LeanPopen`) begins; multiprocessing's own start is a
# pickle (b"\x80..."), so the fork server tells them apart by the first bytes.
LEAN_START = b"cronjobs-job\0"
LEAN_PYTHON = sys.version_info < (3, 14)  # multiprocessing's fork-server layout it relies on
LEAN_HEADER = struct.Struct("!III")  # lengths: the settings' key, the settings, the runtime
SEND_RUNG_SECONDS = 0.5  # how long an ending job process waits to send its rows' messages


class RuntimeLimit(BaseException):
    """Raised in the handler by the MAX_RUNTIME alarm (a BaseException, so that a handler's
    `except Exception` does not swallow it)."""


def _preload_builtin_handlers() -> None:
    # Imported once in the fork server, so every job process shares these pages.
    for info in pkgutil.iter_modules(_builtin_handlers.__path__):
        try:
            importlib.import_module(f"{_builtin_handlers.__name__}.{info.name}")
        except Exception:
            pass


def _preload_app() -> App | None:
    """The App of the worker's settings (read from the same environment), with its
    handlers loaded, built once in the fork server; None when that fails (the job
    process then builds its own and reports the error)."""
    try:
        app = App(Settings.load())
        app.handlers.load()
        return app
    except Exception:
        return None


_PRELOADED: App | None = None
_PRELOADED_KEY = b""  # `settings_key(_PRELOADED.settings)`: what a lean start compares
_NO_RUNTIME = pickle.dumps(Runtime())  # a worker outside `cronjobs serve`


def preload() -> None:
    """In the fork server, once: import the built-in handlers, build the App of the
    worker's settings (`preloaded()`), then move everything made so far to a generation
    the collector never scans, so a job process's collections do not touch (and copy)
    the fork server's pages."""
    global _PRELOADED, _PRELOADED_KEY
    _preload_builtin_handlers()
    _PRELOADED = _preload_app()
    if _PRELOADED is not None:  # set up here once, not by each job process
        _PRELOADED_KEY = settings_key(_PRELOADED.settings)
        try:
            logs.setup(_PRELOADED.settings.log_level)
        except Exception:  # never the fork server's end: each job process sets up its own
            pass
    _libc()
    load_kill_timer()
    if LEAN_PYTHON:  # this process is a fork server: its loop calls it
        forkserver._serve_one = _serve_one
    gc.freeze()


def is_stand_in_tracker(fd: int) -> bool:
    """Whether `fd`, multiprocessing's resource tracker of this process, is the stand-in
    of `runner.skip_resource_tracker` (`/dev/null`, a character device; a tracker's is a
    pipe)."""
    try:
        return stat.S_ISCHR(os.fstat(fd).st_mode)
    except OSError:
        return False


def settings_key(settings: Settings) -> bytes:
    """Bytes that are equal for settings of equal values, in any process: the pickle of
    their values in field order, the sections' as dicts too (the pickle of a model holds
    the set of fields given, whose order differs between interpreters)."""
    return pickle.dumps(settings.model_dump())


def _serve_one(child_r: int, fds: list[int], unused_fds: list[int],
               handlers: dict) -> int:
    """In a job process just forked by the fork server (multiprocessing's loop calls it
    in place of its own `_serve_one`): what that one does, then `serve` at once for a
    lean start. multiprocessing's start unpickles its preparation data and a `Process`
    object with the worker's settings in every job process, which made a good part of the
    fork server's pages its own (bench/NOTES.md has the figures); a lean start reads
    the settings' key (`settings_key`) and unpickles the settings only when it differs
    from the fork server's, and the runtime only in `cronjobs serve`. Any other
    process asked of this fork server (a thread handler of the worker that uses
    multiprocessing's forkserver context) starts the stock way. Either drops the stand-in
    of a resource tracker (`runner.skip_resource_tracker`): a process that registers a
    resource starts a tracker of its own. Returns the exit code."""
    signal.set_wakeup_fd(-1)
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    for fd in unused_fds:
        os.close(fd)
    server, tracker = forkserver._forkserver, resource_tracker._resource_tracker
    (server._forkserver_alive_fd, tracker._fd, *server._inherited_fds) = fds
    if is_stand_in_tracker(tracker._fd):  # the worker runs none: this process, if it must
        os.close(tracker._fd)
        tracker._fd = None
    source = os.fdopen(child_r, "rb", closefd=True)
    head = source.read(len(LEAN_START))
    if head != LEAN_START:
        return _stock_start(head, source)
    try:
        sizes = LEAN_HEADER.unpack(source.read(LEAN_HEADER.size))
        key, settings_bytes, runtime_bytes = (source.read(size) for size in sizes)
        source.close()
        settings = None if key == _PRELOADED_KEY and _PRELOADED is not None \
            else pickle.loads(settings_bytes)
        runtime = Runtime() if runtime_bytes == _NO_RUNTIME else pickle.loads(runtime_bytes)
        process.current_process().name = "cronjobs-job"  # as multiprocessing's start names it
        util._finalizer_registry.clear()  # what multiprocessing's start does, too
        util._run_after_forkers()
        try:
            serve(Connection(server._inherited_fds[0]), settings, runtime)
        finally:  # what multiprocessing's end of a process does: finalizers, children
            util._exit_function()
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    finally:
        util._flush_std_streams()


def _stock_start(head: bytes, source: io.BufferedReader) -> int:
    """multiprocessing's own start (`spawn._main`) of a process whose first bytes were
    read already: its preparation data and `Process` object, then its bootstrap."""
    parent_sentinel = os.dup(source.fileno())
    stream = io.BytesIO(head)
    current = process.current_process()
    current._inheriting = True
    try:
        preparation = reduction.pickle.load(_Chained(stream, source))
        spawn.prepare(preparation)
        child = reduction.pickle.load(_Chained(stream, source))
    finally:
        del current._inheriting
        source.close()
    return child._bootstrap(parent_sentinel)


class _Chained(io.RawIOBase):
    """Reads what is left of `first`, then from `rest` (a pickle that began in bytes
    read already)."""

    def __init__(self, first: io.BytesIO, rest: io.BufferedReader) -> None:
        self._first, self._rest = first, rest

    def read(self, size: int = -1) -> bytes:
        data = self._first.read(size)
        if size < 0:
            return data + self._rest.read()
        return data + (self._rest.read(size - len(data)) if len(data) < size else b"")

    def readline(self, size: int = -1) -> bytes:
        line = self._first.readline(size)
        if line.endswith(b"\n") or 0 <= size <= len(line):
            return line
        return line + self._rest.readline(-1 if size < 0 else size - len(line))

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def signal_on_parent_death(signum: int) -> None:
    """Have the kernel send `signum` to this process when its parent dies
    (`PR_SET_PDEATHSIG`, Linux; nothing elsewhere, where the pipes' EOF still ends it)."""
    _prctl(1, signum)  # PR_SET_PDEATHSIG


def name_process(name: str) -> None:
    """Set this process's name as `ps -e`, `top` and `pgrep` show it (`PR_SET_NAME`, at
    most 15 bytes; Linux only, nothing elsewhere). A process forked from the worker would
    otherwise be listed, and matched, as `cronjobs`."""
    _prctl(15, name.encode()[:15])  # PR_SET_NAME


def _prctl(option: int, arg: int | bytes) -> None:
    libc = _libc()
    if libc is not None:
        libc.prctl(option, arg)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library with `prctl` (loaded once, in the fork server: its job processes
    share it); None where there is none (not Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl  # noqa: B018  (AttributeError where there is no prctl)
        return libc
    except (OSError, AttributeError):
        return None


def _die_with_parent() -> None:
    signal_on_parent_death(signal.SIGKILL)
    # multiprocessing hands every process the fork server starts a copy of the worker's
    # end of the pipe the fork server watches; while a job process held it, the fork
    # server outlived a killed worker, and so did the job (its parent was still alive).
    fd, forkserver._forkserver._forkserver_alive_fd = \
        forkserver._forkserver._forkserver_alive_fd, None
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _on_alarm(signum, frame) -> None:
    raise RuntimeLimit()


def preloaded() -> App | None:
    """The App the fork server built from `Settings.load()` (shared by its job
    processes), or None when building it failed."""
    return _PRELOADED


def app_for(settings: Settings | None) -> App:
    """The App a job process runs jobs with: the preloaded one when `settings` equal its
    settings (or are None: a lean start found them equal), else a new App of `settings`
    (its own handler registry, loaded now, not during the first job).

    Raises:
        HandlerError, ConfigError: the new App's handlers cannot be loaded.
    """
    if _PRELOADED is not None and (settings is None or _PRELOADED.settings == settings):
        return _PRELOADED  # shared with the fork server: no private copy of the registry
    app = App(settings)
    app.handlers.load()
    return app


def run_one(app: App, job: Job, max_runtime_seconds: float,
            runtime: Runtime | None = None,
            kill_timer: KillTimer | None = None) -> tuple[Outcome, bool]:
    """Run `job` under the alarm (SIGALRM at `max_runtime_seconds`) and, when given,
    `kill_timer` (SIGKILL `KILL_GRACE_SECONDS` later, for a handler the alarm cannot
    reach); returns `(outcome, keep_going)` — False after a timeout, when the process
    ends (its kill timer stays armed: it ends by then at the latest)."""
    if kill_timer is not None:
        kill_timer.arm(max_runtime_seconds + KILL_GRACE_SECONDS)
    try:
        signal.setitimer(signal.ITIMER_REAL, max_runtime_seconds)
        try:
            outcome = call_handler(app, job, runtime, reraise=(RuntimeLimit,))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if kill_timer is not None:
            kill_timer.disarm()
        return outcome, True
    except RuntimeLimit:  # also one that fired just before the timer was cancelled
        return timeout(max_runtime_seconds, Reason.TIMEOUT_ALARM), False


def serve(conn: Connection, settings: Settings | None, runtime: Runtime) -> None:
    """The job process's loop: receive `(job, max_runtime_seconds)`, send back
    `(job id, outcome, keep_going)`; `None` or a closed pipe ends it.

    Args:
        conn: the job process's end of the pipe.
        settings: the worker's settings (see `app_for`); None: the preloaded App's.
        runtime: handed to every job's `JobContext`.
    """
    _die_with_parent()
    name_process("cj-job")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _on_alarm)
    logs.setup((settings if settings is not None else _PRELOADED.settings).log_level)
    app = app_for(settings)
    kill_timer = KillTimer.create()  # per process: a fork does not inherit it
    conn.send(READY)
    try:
        _serve_jobs(conn, app, runtime, kill_timer)
    finally:
        _send_rung()


def _serve_jobs(conn: Connection, app: App, runtime: Runtime,
                kill_timer: KillTimer | None) -> None:
    me = os.getpid()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        outcome, keep_going = run_one(app, *message, runtime, kill_timer)
        if os.getpid() != me:
            # A handler forked and its child returned from handle() too: only the job
            # process answers (two answers on one pipe would be read as the next job's).
            os._exit(0)
        try:  # pickled before anything is sent (as `runner.JobProcess.start` does)
            answer = pickle.dumps((message[0].id, outcome, keep_going), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # pickle refused the outcome (its result); nothing was sent
            answer = pickle.dumps((message[0].id, unsendable(exc), keep_going))
        conn.send_bytes(answer)
        if not keep_going:
            return


def _send_rung() -> None:
    """As the job process ends (retired, after a timeout, its pipe closed): send the
    broker messages of the rows its jobs dispatched that its doorbell thread has not sent
    yet. The process ends by `os._exit`, which runs no exit hook: without this, a child
    row's message would die with a process retired right after its job
    (`job_process_idle_seconds` 0) and the row wait for the sweep. A process that never
    dispatched has no doorbell thread: nothing to wait for. Waits at most
    `SEND_RUNG_SECONDS` (a broker that does not answer): the worker kills a retired process
    that lingers for a second."""
    broker = sys.modules.get("cronjobs.broker")
    if broker is not None:
        broker.flush_rung(SEND_RUNG_SECONDS)
