"""`cronjobs worker --processes N`: N worker processes forked from the command's process
and kept up (a recycled child is replaced at once, a failed one after a growing pause)."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from .worker import Signals, _restart_pause

log = logging.getLogger("cronjobs.worker")


def run_children(child: Callable[[Signals], int], processes: int,
                 stop: threading.Event | None = None) -> int:
    """Run `processes` child worker processes and keep them up.

    Each child is forked from this process, which has imported the worker's code but holds
    no database connection and runs no thread: a child starts at once and shares those
    pages, then runs `child(signals)` (its own App, fork server and `run_worker`, stopped
    by `signals`) and exits with what it returned. A child that exits 0 (recycled) is
    replaced at once; one that fails is started again after a pause growing to 30 s.
    SIGTERM/SIGINT are passed on; returns 0 once all ended.

    Args:
        child: what a child runs, given the child's own `Signals`; returns its exit code.
        processes: children kept running.
        stop: ends the children when set (default: this process's SIGTERM/SIGINT).
    """
    signals = Signals().install() if stop is None else None
    stop = stop or signals.stop
    fork = multiprocessing.get_context("fork")
    gc.freeze()  # what the children inherit is never scanned (nor copied) by their collector
    children: list[multiprocessing.process.BaseProcess | None] = [None] * processes
    failures = [0] * processes
    restart_at = [0.0] * processes
    while not stop.is_set():
        for i in range(processes):
            proc = children[i]
            if proc is not None and proc.exitcode is not None:
                code = proc.exitcode
                failures[i] = 0 if code == 0 else failures[i] + 1
                pause = _restart_pause(failures[i])
                (log.info if code == 0 else log.warning)(
                    "worker child %d exited with %d; starting a new one in %.0f s", proc.pid,
                    code, pause)
                restart_at[i] = time.monotonic() + pause
                children[i] = None
            if children[i] is None and time.monotonic() >= restart_at[i]:
                children[i] = fork.Process(target=_child_main, args=(child, stop),
                                           name=f"cronjobs worker {i + 1}/{processes}")
                children[i].start()
        stop.wait(0.2)
    urgent = signals is not None and signals.urgent.is_set()
    for proc in children:
        if proc is not None and proc.exitcode is None:
            os.kill(proc.pid, signal.SIGINT if urgent else signal.SIGTERM)
    for proc in children:
        if proc is not None:
            proc.join()
    return 0


def _child_main(child: Callable[[Signals], int], parents_stop: threading.Event) -> None:
    """A forked child: its own signal handlers first (a signal that reached the parent's
    copy since the fork stops it too), then `child(signals)`; exits with its code."""
    signals = Signals().install()
    if parents_stop.is_set():
        signals.stop.set()
    sys.exit(child(signals))
