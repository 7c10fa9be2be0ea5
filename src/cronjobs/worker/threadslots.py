"""Jobs of `ISOLATION = "thread"` handlers: each in a daemon thread of the worker.

No pipe, no process: for I/O whose every call has a timeout. A thread cannot be stopped,
so a job past MAX_RUNTIME + grace is abandoned: its row gets a `timeout` outcome at once
(retried after backoff, or failed) and the worker recycles, so that the thread ends with
the process. An abandoned job whose thread comes back later is ignored: its row has moved on.
"""

from __future__ import annotations

import queue as queues
import threading
import time
from collections.abc import Callable

from ..app import App
from ..handler import Job
from ..job.context import Runtime
from ..job.executor import call_handler
from ..job.outcome import Outcome, timeout
from ..status import Reason


class ThreadSlots:
    """The running thread jobs of one worker. `start`, `busy_count`, `running_ids` and
    `abandon_overdue` may be called from any thread; `collect` from the pool's loop only.

    Args:
        app: the App the handlers run with.
        runtime: handed to every job's `JobContext`.
        wake: called (from the job's thread) when an outcome is ready to collect.
    """

    def __init__(self, app: App, runtime: Runtime, *, wake: Callable[[], None]) -> None:
        self._app = app
        self._runtime = runtime
        self._wake = wake
        self._lock = threading.Lock()  # guards _jobs
        self._jobs: dict[int, tuple[float, float, Job]] = {}  # id -> (start, limit s, job)
        self._outcomes: queues.SimpleQueue = queues.SimpleQueue()
        self._abandoned: set[int] = set()  # jobs given up at MAX_RUNTIME (loop only)

    def start(self, job: Job, max_runtime_seconds: float, cls: type | None = None) -> None:
        """Run `job` in a new daemon thread: one abandoned at MAX_RUNTIME must not keep
        the process from exiting (a pool's threads are joined at exit). `cls`: its handler
        class, when the caller resolved it (else the App resolves it)."""
        with self._lock:
            self._jobs[job.id] = (time.monotonic(), max_runtime_seconds, job)
        threading.Thread(target=self._run, args=(job, cls), daemon=True,
                         name=f"cronjobs-job-{job.id}").start()

    def busy_count(self) -> int:
        """Thread jobs running (abandoned ones not counted)."""
        with self._lock:
            return len(self._jobs)

    def ended_uncollected(self) -> bool:
        """Whether an outcome waits for `collect` (a job ended, or was given up)."""
        return not self._outcomes.empty()

    def running_ids(self) -> list[int]:
        """Ids of the rows running in threads."""
        with self._lock:
            return list(self._jobs)

    def collect(self) -> list[tuple[Job, Outcome, float]]:
        """The jobs that ended since the last call: `(job, outcome, duration_ms)`, the
        timeouts of abandoned jobs included, late answers of abandoned jobs left out."""
        ended = []
        while True:
            try:
                job, result, duration_ms, abandoned = self._outcomes.get_nowait()
            except queues.Empty:
                return ended
            if abandoned:
                self._abandoned.add(job.id)
            elif job.id in self._abandoned:  # it came back after all: its row moved on
                self._abandoned.discard(job.id)
                continue
            with self._lock:
                self._jobs.pop(job.id, None)
            ended.append((job, result, duration_ms))

    def abandon_overdue(self, grace_seconds: float) -> list[Job]:
        """Give up the jobs running past MAX_RUNTIME + `grace_seconds`: their rows get a
        `timeout` outcome now (collected by the loop). Returns those jobs: the caller
        recycles the worker, so that their threads end with the process."""
        now = time.monotonic()
        with self._lock:
            overdue = [(job, started, limit) for started, limit, job in self._jobs.values()
                       if now - started > limit + grace_seconds]
            for job, _, _ in overdue:
                del self._jobs[job.id]
        for job, started, limit in overdue:
            result = timeout(limit, Reason.TIMEOUT_ABANDONED)
            self._outcomes.put((job, result, (now - started) * 1000, True))
        if overdue:
            self._wake()
        return [job for job, _, _ in overdue]

    def give_up(self, job_id: int, result: Outcome) -> Job | None:
        """Give up thread job `job_id` now (an operator's Stop): its row gets `result` at
        once (collected by the loop), as a job past MAX_RUNTIME. Returns the job, or None
        when no thread runs it; the caller recycles the worker, so that the thread ends
        with the process."""
        with self._lock:
            found = self._jobs.pop(job_id, None)
        if found is None:
            return None
        started, _, job = found
        self._outcomes.put((job, result, (time.monotonic() - started) * 1000, True))
        self._wake()
        return job

    def _run(self, job: Job, cls: type | None) -> None:
        started = time.monotonic()
        result = call_handler(self._app, job, self._runtime, cls=cls)
        self._outcomes.put((job, result, (time.monotonic() - started) * 1000, False))
        self._wake()
