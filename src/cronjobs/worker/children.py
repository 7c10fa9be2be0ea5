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

from .jobprocess import signal_on_parent_death
from .loop import Signals, _restart_pause

log = logging.getLogger("cronjobs.worker.loop")

HEALTHY_SECONDS = 60.0  # a child that ran this long before it failed is restarted after 1 s


def run_children(child: Callable[[Signals], int], processes: int,
                 stop: threading.Event | None = None) -> int:
    """Run `processes` child worker processes and keep them up.

    Each child is forked from this process, which has imported the worker's code but holds
    no database connection and runs no thread: a child starts at once and shares those
    pages, then runs `child(signals)` (its own App, fork server and `run_worker`, stopped
    by `signals`) and exits with what it returned. A child that exits 0 (recycled) is
    replaced at once; one that fails is started again after a pause growing to 30 s (back
    to 1 s when it had run for `HEALTHY_SECONDS`). SIGTERM/SIGINT are passed on; returns 0
    once all ended. No resource tracker runs for the children (nothing of theirs starts
    one: their job processes come from their own fork servers, `forkserver`).

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
    failures, restart_at, started_at = [0] * processes, [0.0] * processes, [0.0] * processes
    while not stop.is_set():
        for i in range(processes):
            proc = children[i]
            if proc is not None and proc.exitcode is not None:
                code = proc.exitcode
                if time.monotonic() - started_at[i] >= HEALTHY_SECONDS:
                    failures[i] = 0  # a failure after a long healthy run starts the pauses over
                failures[i] = 0 if code == 0 else failures[i] + 1
                pause = _restart_pause(failures[i])
                (log.info if code == 0 else log.warning)(
                    "worker child %d exited with %d; starting a new one in %.0f s", proc.pid,
                    code, pause)
                restart_at[i] = time.monotonic() + pause
                children[i] = None
            if children[i] is None and time.monotonic() >= restart_at[i]:
                children[i] = fork.Process(target=_child_main,
                                           args=(child, stop, os.getpid()),
                                           name=f"cronjobs worker {i + 1}/{processes}")
                children[i].start()
                started_at[i] = time.monotonic()
        stop.wait(0.2)
    _stop_children([p for p in children if p is not None and p.exitcode is None], signals)
    return 0


def _stop_children(living: list, signals: Signals | None) -> None:
    """SIGTERM the children (SIGINT after a second SIGINT here: cut off now) and wait for
    them; a second SIGINT that comes while they finish is passed on too."""
    urgent = signals is not None and signals.urgent.is_set()
    for proc in living:
        os.kill(proc.pid, signal.SIGINT if urgent else signal.SIGTERM)
    while any(p.exitcode is None for p in living):
        if signals is not None and signals.urgent.is_set() and not urgent:
            urgent = True
            for proc in living:
                if proc.exitcode is None:
                    os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.1)


def _child_main(child: Callable[[Signals], int], parents_stop: threading.Event,
                parent: int) -> None:
    """A forked child: its own signal handlers first (a signal that reached the parent's
    copy since the fork stops it too, as does the death of `parent`, its pid), then
    `child(signals)`; exits with its code."""
    signals = Signals().install()
    # SIGTERM when the parent dies: a parent killed with SIGKILL leaves no worker running
    # on, which its restart would double.
    signal_on_parent_death(signal.SIGTERM)
    if parents_stop.is_set() or os.getppid() != parent:  # a signal, or the parent died
        signals.stop.set()
    sys.exit(child(signals))

