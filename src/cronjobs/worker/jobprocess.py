"""The job process: runs one job at a time in its main thread, under a MAX_RUNTIME alarm.

Job processes are forked from the fork server (`forkserver`), which called `preload()`
once (`run_server`): the engine, the registry and the built-in handlers are
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
until the worker restarts, or until a fork server is started again (the idle one stopped,
or one died): that one reads the handler files anew, skips one that no longer imports
(`load_handlers`) and its job processes fail that file's rows with the error
(`not_loaded`: attempt used), while the other types run. A job process whose App cannot be
built at all sends `NOT_READY` and why, once, to its worker (which says it once while it
lasts and reports itself `stalled`). A worker started from code with other settings gets job
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
import logging
import os
import pickle
import pkgutil
import signal
import socket
import struct
import sys
from dataclasses import replace
from multiprocessing import active_children
from multiprocessing.connection import Connection

import handlers as _builtin_handlers
import registry

from .. import logs, tracing
from ..app import App
from ..config import Settings
from ..errors import CronjobsError
from ..handler import Job
from ..job.context import Runtime
from ..job.executor import call_handler
from ..job.failures import bounded, traceback_text
from ..job.outcome import Outcome, timeout, unsendable
from ..status import Reason
from .forkserver import serve as serve_forks
from .killtimer import KILL_GRACE_SECONDS, KillTimer
from .killtimer import load as load_kill_timer

log = logging.getLogger("cronjobs.worker.loop")
READY = "ready"  # what a job process sends once it can take jobs (`runner.READY` too)
NOT_READY = "not ready: "  # + why: its App cannot be built (`runner.NOT_READY` too)
START_HEADER = struct.Struct("!III")  # lengths: the settings' key, the settings, the runtime
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
    process then builds its own and reports the error). A handler file that does not
    import (broken since the worker started) is skipped (`load_handlers`)."""
    try:
        app = App(Settings.load())
        load_handlers(app)
        return app
    except Exception:
        return None


_PRELOADED: App | None = None
_PRELOADED_KEY = b""  # `settings_key(_PRELOADED.settings)`: what `run_process` compares
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
        say_broken(_PRELOADED)  # once per fork server, not per job process
    _libc()
    load_kill_timer()
    gc.freeze()


def settings_key(settings: Settings) -> bytes:
    """Bytes that are equal for settings of equal values, in any process: the pickle of
    their values in field order, the sections' as dicts too (the pickle of a model holds
    the set of fields given, whose order differs between interpreters)."""
    return pickle.dumps(settings.model_dump())


def start_message(settings: Settings, runtime: Runtime) -> bytes:
    """The first message a job process reads on its pipe (`run_process`): the key of the
    worker's settings (`settings_key`), their pickle and the runtime's pickle."""
    parts = (settings_key(settings), pickle.dumps(settings), pickle.dumps(runtime))
    return b"".join((START_HEADER.pack(*map(len, parts)), *parts))


def run_server(sock: socket.socket) -> None:
    """The fork server's life (`forkserver.serve`), once started: named `cj-forkserver`
    for `ps` (its command line may be the worker's), the preload, then its loop; returns
    when the worker's end of `sock` closes."""
    name_process("cj-forkserver")
    preload()
    serve_forks(sock, run_process)


def run_process(fd: int, server_pid: int) -> int:
    """A job process, just forked by the fork server `server_pid` and handed the
    descriptor `fd` of its end of the pipe: die with the fork server, read the start
    message (`start_message`), then `serve`. The settings are unpickled only when their
    key differs from the preloaded App's (unpickling them made a good part of the fork
    server's pages each job process's own); the runtime only in `cronjobs serve`.
    Returns the exit code."""
    if not _die_with_parent(server_pid):
        return 1
    conn = Connection(fd)
    try:
        data = conn.recv_bytes()
    except (EOFError, OSError):  # the worker gave up on it before it started
        return 1
    parts, at = [], START_HEADER.size
    for size in START_HEADER.unpack_from(data):
        parts.append(data[at:at + size])
        at += size
    key, settings_bytes, runtime_bytes = parts
    settings = None if key == _PRELOADED_KEY and _PRELOADED is not None \
        else pickle.loads(settings_bytes)
    runtime = Runtime() if runtime_bytes == _NO_RUNTIME else pickle.loads(runtime_bytes)
    inherited = active_children()  # the worker's, if any: not this process's to end
    try:
        serve(conn, settings, runtime)
    finally:
        _end_handler_processes(inherited)
    return 0


def _end_handler_processes(inherited: list) -> None:
    """What multiprocessing does as one of its own processes ends, for the processes a
    handler started with it (those not `inherited`): the daemonic ones terminated, then all
    joined (a retired job process that lingers is killed by its worker a second later)."""
    mine = [child for child in active_children() if child not in inherited]
    for child in mine:
        if child.daemon:
            child.terminate()
    for child in mine:
        child.join()


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


def _die_with_parent(parent_pid: int) -> bool:
    """Have the kernel kill this process when its parent, the fork server `parent_pid`,
    dies; False when it has died already (before this was asked)."""
    signal_on_parent_death(signal.SIGKILL)
    return os.getppid() == parent_pid


def _on_alarm(signum, frame) -> None:
    raise RuntimeLimit()


def preloaded() -> App | None:
    """The App the fork server built from `Settings.load()` (shared by its job
    processes), or None when building it failed."""
    return _PRELOADED


def app_for(settings: Settings | None) -> App:
    """The App a job process runs jobs with: the preloaded one when `settings` equal its
    settings (or are None: a lean start found them equal), else a new App of `settings`
    (its own handler registry, loaded now, not during the first job; a handler file
    that does not import is skipped: `load_handlers`).

    Raises:
        HandlerError, ConfigError: the new App's handlers cannot be loaded.
    """
    if _PRELOADED is not None and (settings is None or _PRELOADED.settings == settings):
        return _PRELOADED  # shared with the fork server: no private copy of the registry
    app = App(settings)
    load_handlers(app)
    return app


def load_handlers(app: App) -> None:
    """Load `app`'s handlers, skipping a folder file that does not import or whose class
    is refused (`registry.HandlerRegistry.load(skip_broken=True)`; kept in
    `app.handlers.broken`): the worker checked every file when it started, so such a file
    was broken after that, and only its own rows fail (`not_loaded`); the others run.

    Raises:
        HandlerError: a built-in or plugin handler cannot be loaded.
    """
    if isinstance(app.handlers, registry.HandlerRegistry):
        app.handlers.load(skip_broken=True)
    else:  # a registry given to the App by code: its own rules
        app.handlers.load()


def _broken(app: App) -> dict[str, str]:
    """The handler files `app`'s registry skipped (path -> error line, then traceback)."""
    return getattr(app.handlers, "broken", None) or {}


def say_broken(app: App) -> None:
    """Log, at ERROR, each handler file `app`'s registry skipped (once: the fork server
    calls this as it starts, not each job process)."""
    for text in _broken(app).values():
        log.error("%s; its rows fail (attempts used, retried) until the file is fixed; "
                  "the other handlers run", text.partition("\n")[0])


def not_loaded(app: App, job: Job) -> Outcome | None:
    """The outcome of `job` when its type has no handler here because a handler file
    could not be loaded (`load_handlers`): `failed`, so that the attempt is used and the
    row retried with backoff, then failed, with the files' errors and tracebacks; None
    when its type resolves, or when no file was skipped (the usual `no_handler`)."""
    broken = _broken(app)
    if not broken or app.resolve(job.type) is not None:
        return None
    lines = [text.partition("\n")[0] for text in broken.values()]
    error = f"no handler for type {job.type!r} in this job process: {'; '.join(lines)}"
    return Outcome("failed", error=error, log=error,
                   traceback=bounded(error, "\n".join(broken.values())))


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
            outcome = not_loaded(app, job) or call_handler(app, job, runtime,
                                                           reraise=(RuntimeLimit,))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if kill_timer is not None:
            kill_timer.disarm()
        return outcome, True
    except RuntimeLimit as exc:  # also one that fired just before the timer was cancelled
        # Where the handler was when its time ran out: the traceback of the alarm.
        ended = timeout(max_runtime_seconds, Reason.TIMEOUT_ALARM)
        return replace(ended, traceback=traceback_text(exc, ended.error or "")), False


def serve(conn: Connection, settings: Settings | None, runtime: Runtime) -> None:
    """The job process's loop: receive `(job, max_runtime_seconds)`, send back
    `(job id, outcome, keep_going)`; `None` or a closed pipe ends it. A process whose App
    cannot be built (`app_for` raised) sends `NOT_READY` and the error instead, and ends.

    Args:
        conn: the job process's end of the pipe.
        settings: the worker's settings (see `app_for`); None: the preloaded App's.
        runtime: handed to every job's `JobContext`.
    """
    name_process("cj-job")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _on_alarm)
    logs.setup((settings if settings is not None else _PRELOADED.settings).log_level)
    try:
        app = app_for(settings)
    except CronjobsError as exc:  # its worker says why (once while it lasts), no traceback
        conn.send(f"{NOT_READY}{exc}")
        return
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
    that lingers for a second. Then its jobs' spans not exported yet (`tracing.flush`, as
    long again at most; nothing without OpenTelemetry or an SDK provider)."""
    broker = sys.modules.get("cronjobs.broker")
    if broker is not None:
        broker.flush_rung(SEND_RUNG_SECONDS)
    tracing.flush(SEND_RUNG_SECONDS)  # the spans of its jobs (an SDK's batch processor)
