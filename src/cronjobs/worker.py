"""`cronjobs worker`: Dramatiq consumers in this process, or N child processes of them."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time

import dramatiq

from .app import App
from .sweep import Sweeper, sweep

log = logging.getLogger("cronjobs.worker")


class WorkerProcess:
    """The consumers of one process: a Dramatiq worker plus the sweeper/lease thread.

    Args:
        app: the App (its broker and executor are used).
        queues: queue names to consume.
        threads: worker threads (jobs run at the same time in this process).
    """

    def __init__(self, app: App, queues: list[str], threads: int = 8) -> None:
        self.app, self.queues, self.threads = app, queues, threads
        app.broker.declare(queues)
        interval = app.settings.sweep_interval_seconds
        if app.settings.embedded_broker:
            interval = min(interval, 2.0)  # other processes cannot reach our in-process broker
        self.sweeper = Sweeper(app, queues, interval, app.executor)
        self.worker = dramatiq.Worker(app.broker.dramatiq, queues=set(queues),
                                      worker_threads=threads, worker_timeout=250)

    def start(self) -> None:
        """Start consuming; rows left pending by a previous run are resent first."""
        self.worker.start()
        try:
            idle = 0.0 if self.app.settings.embedded_broker else None
            sweep(self.app, self.queues, idle_seconds=idle)
        except Exception as exc:
            log.warning("initial sweep failed (%s); the sweeper will retry", exc)
        self.sweeper.start()
        log.info("worker %s consuming %s with %d thread(s)", self.app.executor.worker_id,
                 ",".join(self.queues), self.threads)

    def stop(self, timeout_seconds: float = 30) -> None:
        """Stop taking messages and wait up to `timeout_seconds` for running jobs."""
        self.sweeper.stop()
        self.worker.stop(timeout=int(timeout_seconds * 1000))


def run_worker(app: App, queues: list[str], threads: int = 8,
               stop: threading.Event | None = None) -> int:
    """Consume `queues` in this process until SIGTERM/SIGINT (or `stop` is set); returns 0."""
    stop = stop or _signal_event()
    process = WorkerProcess(app, queues, threads)
    process.start()
    stop.wait()
    log.info("worker %s stopping", app.executor.worker_id)
    process.stop()
    return 0


def run_children(argv: list[str], processes: int, stop: threading.Event | None = None) -> int:
    """Run `processes` child workers (`cronjobs worker ... --processes 1`) and keep them up.

    A child that exits is started again after a pause (growing to 30 s while it keeps
    failing). SIGTERM/SIGINT are passed on to the children; returns 0 once all ended.
    """
    stop = stop or _signal_event()
    cmd = [sys.executable, "-m", "cronjobs", *argv, "--processes", "1"]
    children: list[subprocess.Popen | None] = [None] * processes
    pauses = [0.0] * processes
    restart_at = [0.0] * processes
    while not stop.is_set():
        for i in range(processes):
            child = children[i]
            if child is not None and child.poll() is not None:
                code = child.returncode
                pauses[i] = 0.0 if code == 0 else min(30.0, max(1.0, pauses[i] * 2))
                log.warning("worker child %d exited with %d; restarting in %.0f s", child.pid,
                            code, pauses[i])
                restart_at[i] = time.monotonic() + pauses[i]
                children[i] = None
            if children[i] is None and time.monotonic() >= restart_at[i]:
                children[i] = subprocess.Popen(cmd)
        stop.wait(0.5)
    for child in children:
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        if child is not None:
            child.wait()
    return 0


def _signal_event() -> threading.Event:
    stop = threading.Event()

    def on_signal(signum, _frame) -> None:  # noqa: ANN001
        log.info("received %s; finishing current jobs", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
