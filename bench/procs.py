"""Worker processes for the benchmarks: start them, wait for completed jobs, measure memory.

Every process starts in a session of its own, so `Proc.stop()` can end the whole tree
(job processes, Celery pool children) and nothing is left running after a scenario.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .stores import REDIS, ROOT


class WorkerDied(RuntimeError):
    """A benchmark worker process exited before it was told to."""


class Proc:
    """One benchmark process (and its descendants, by session).

    Args:
        cmd: the command line.
        name: shown in errors.
        env: its environment (default ours).
        stop_seconds: how long `stop()` waits after SIGTERM before SIGKILL.
    """

    def __init__(self, cmd: list[str], name: str, env: dict | None = None,
                 stop_seconds: float = 30) -> None:
        self.name = name
        self.stop_seconds = stop_seconds
        self._log = tempfile.TemporaryFile()
        self.popen = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.popen.pid

    def check(self) -> None:
        """Raise `WorkerDied` (with the end of its output) if the process has exited."""
        if self.popen.poll() is not None:
            raise WorkerDied(f"{self.name} exited with {self.popen.returncode}:\n{self.output()}")

    def output(self, chars: int = 3000) -> str:
        """The last `chars` characters of its stdout/stderr."""
        self._log.seek(0)
        text = self._log.read().decode(errors="replace")
        self._log.seek(0, 2)
        return text[-chars:]

    def stop(self, timeout_seconds: float | None = None) -> None:
        """SIGTERM, wait up to `timeout_seconds` (default `stop_seconds`), then SIGKILL
        everything in its session."""
        if timeout_seconds is None:
            timeout_seconds = self.stop_seconds
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                print(f"bench: {self.name} did not stop within {timeout_seconds:g} s of SIGTERM; "
                      "killed", file=sys.stderr)
        try:
            os.killpg(self.pid, signal.SIGKILL)  # stray job processes or pool children
        except (ProcessLookupError, PermissionError):
            pass
        self.popen.wait()

    def json_result(self, timeout_seconds: float = 60) -> dict:
        """Wait for the process to end and return the last JSON line it printed.

        Raises:
            WorkerDied: it printed no JSON line (its output is in the message).
        """
        import json

        self.popen.wait(timeout_seconds)
        for line in reversed(self.output(chars=50_000_000).splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        raise WorkerDied(f"{self.name} printed no result:\n{self.output()}")


class Procs(list):
    """A list of `Proc` that stops them all on exit of a `with` block."""

    def check(self) -> None:
        """Raise `WorkerDied` if any process has exited."""
        for proc in self:
            proc.check()

    def stop(self) -> None:
        """Stop every process (SIGTERM to all first, then wait for each)."""
        for proc in self:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in self:
            proc.stop()

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def producer(*args: object) -> Proc:
    """A `bench.producer` process (see that module for the modes and arguments)."""
    return Proc([sys.executable, "-m", "bench.producer", *map(str, args)], f"producer {args[0]}")


def cronjobs_worker(env: dict, threads: int = 8, processes: int = 1,
                    prefetch: int | None = None, queues: str = "default",
                    extra: Iterable[str] = ()) -> Procs:
    """`cronjobs worker` as a user starts it (one command; `--processes` forks inside)."""
    cmd = [sys.executable, "-m", "cronjobs", "worker", "--queues", queues,
           "--slots", str(threads), "--processes", str(processes), *extra]
    if prefetch:
        cmd += ["--prefetch", str(prefetch)]
    return Procs([Proc(cmd, f"cronjobs worker {processes}x{threads}", env)])


def worker_pair(env: dict, threads: int, module: str = "cronjobs") -> Procs:
    """Two `python -m <module> worker --processes 1` processes of `threads` slots: what
    `cronjobs worker --processes 2` starts, without its supervisor, so a patched worker
    (`bench.unpoliced_worker`) and the stock one run in the same shape."""
    cmd = [sys.executable, "-m", module, "worker", "--queues", "default", "--slots",
           str(threads), "--processes", "1"]
    return Procs(Proc(cmd, f"{module} worker {i + 1}/2", env) for i in range(2))


def bare_dramatiq(ns: str, threads: int, processes: int = 1, sleep_ms: float = 10) -> Procs:
    """`processes` bare Dramatiq worker processes with `threads` threads each."""
    cmd = [sys.executable, "-m", "bench.bare_dramatiq", REDIS, ns, str(threads), str(sleep_ms)]
    return Procs(Proc(cmd, f"bare dramatiq {i + 1}/{processes}") for i in range(processes))


def celery_worker(ns: str, concurrency: int, pool: str = "prefork") -> Procs:
    """A Celery worker (`--pool prefork -c N`) consuming the queue of prefix `ns`."""
    env = dict(os.environ, BENCH_CELERY_NS=ns, BENCH_REDIS=REDIS)
    cmd = [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker", "--pool", pool,
           "--concurrency", str(concurrency), "--queues", ns, "--loglevel", "WARNING",
           "--without-gossip", "--without-mingle", "--without-heartbeat"]
    # Its warm shutdown waits for the tasks its pool holds (more than 30 s at times with
    # a backlog prefetched); the bench has read its figures by then: 5 s, then SIGKILL.
    return Procs([Proc(cmd, f"celery {pool} {concurrency}", env, stop_seconds=5)])


@dataclass(frozen=True)
class Drain:
    """A measured drain: `done` jobs completed in the window of `seconds` (first
    completion seen to the end), `rate` jobs/s, `complete` when every job was done,
    `startup_seconds` from the call of `wait_for` (just after the worker was started) to
    the first completion seen."""

    done: int
    seconds: float
    rate: float
    complete: bool
    startup_seconds: float = 0.0


def wait_for(count_done: Callable[[], int], total: int, procs: Procs, *,
             max_seconds: float, start_timeout_seconds: float = 120,
             poll_seconds: float = 0.05, start_poll_seconds: float = 0.05) -> Drain:
    """Wait until `count_done()` reaches `total` or `max_seconds` after the first completion.

    The window starts at the first poll that sees a completed job, so process start-up
    (imports, job processes) is not counted.

    Args:
        count_done: returns how many jobs have completed so far.
        total: jobs expected.
        procs: checked on every poll; a dead worker raises `WorkerDied`.
        max_seconds: longest measuring window, in seconds (the cap for slow systems).
        start_timeout_seconds: longest wait for the first completion.
        poll_seconds: polling interval in the window.
        start_poll_seconds: polling interval until the first completion (the start-up's
            resolution: the same for every system, whatever its window's interval).

    Returns:
        A `Drain` (rate = jobs completed in the window / window seconds).

    Raises:
        WorkerDied: a worker process exited.
        TimeoutError: nothing completed within `start_timeout_seconds`.
    """
    called = time.monotonic()
    deadline = called + start_timeout_seconds
    while (first := count_done()) <= 0:
        procs.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"no job completed within {start_timeout_seconds:g} s")
        time.sleep(start_poll_seconds)
    t0 = time.monotonic()
    done, t = first, t0
    while done < total and t - t0 < max_seconds:
        time.sleep(poll_seconds)
        procs.check()
        done, t = count_done(), time.monotonic()
    seconds = max(t - t0, 1e-6)
    return Drain(done, seconds, (done - first) / seconds, done >= total, t0 - called)


def rate_from_times(times: list, skip_fraction: float = 0.02) -> float:
    """Jobs/s from the completion times of a drain (datetimes or seconds).

    The first and the last `skip_fraction` of completions (start-up, stragglers) are
    dropped; the rate is the number of completions left divided by the time they span.
    """
    stamps = sorted(t.timestamp() if hasattr(t, "timestamp") else float(t) for t in times)
    cut = int(len(stamps) * skip_fraction)
    stamps = stamps[cut:len(stamps) - cut]
    if len(stamps) < 2 or stamps[-1] <= stamps[0]:
        return 0.0
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def tree_memory(roots: Iterable[int]) -> dict:
    """RSS and PSS of the processes `roots` and all their descendants.

    PSS (proportional set size) shares each page among the processes that map it, so the
    sum over a tree is what the tree really costs; RSS counts shared pages once per
    process.

    Returns:
        `{"rss_mb": float, "pss_mb": float, "processes": int}` (MB = 10**6 bytes).
    """
    import psutil

    seen: dict[int, psutil.Process] = {}
    for pid in roots:
        try:
            root = psutil.Process(pid)
            seen[root.pid] = root
            for child in root.children(recursive=True):
                seen[child.pid] = child
        except psutil.NoSuchProcess:
            pass
    rss = pss = 0
    for proc in seen.values():
        try:
            info = proc.memory_full_info()
        except psutil.NoSuchProcess:
            continue
        rss += info.rss
        pss += info.pss
    return {"rss_mb": round(rss / 1e6, 1), "pss_mb": round(pss / 1e6, 1),
            "processes": len(seen)}


def tree_pids(roots: Iterable[int]) -> list[int]:
    """The pids of `roots` and of all their living descendants."""
    import psutil

    pids: list[int] = []
    for pid in roots:
        try:
            root = psutil.Process(pid)
            pids += [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.NoSuchProcess:
            pass
    return pids


class CpuMeter:
    """CPU seconds (user + system) that a changing set of processes spends in a window.

    `start()` opens the window; every `sample()` reads the processes `pids()` returns
    now and keeps each one's latest reading, so a process that exits later still counts
    up to its last sample. A process first seen after the window opened counts from 0 if
    it was created inside the window, else from its first reading (its CPU before that
    sample is not known to be inside the window).

    Args:
        pids: returns the pids to watch (called at every sample).
    """

    def __init__(self, pids: Callable[[], Iterable[int]]) -> None:
        self._pids = pids
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._opened = 0.0

    def start(self) -> None:
        """Open the window: forget earlier readings and take the first sample."""
        self._first.clear()
        self._last.clear()
        self._opened = time.time()
        self.sample(opening=True)

    def sample(self, opening: bool = False) -> None:
        """Read the CPU times of the processes `pids()` returns now."""
        import psutil

        for pid in self._pids():
            try:
                proc = psutil.Process(pid)
                times = proc.cpu_times()
                used = times.user + times.system
                if pid not in self._first:
                    born_inside = not opening and proc.create_time() >= self._opened
                    self._first[pid] = 0.0 if born_inside else used
            except psutil.NoSuchProcess:
                continue
            self._last[pid] = used

    def seconds(self) -> float:
        """CPU seconds spent in the window so far (up to the last sample)."""
        return sum(self._last[pid] - self._first[pid] for pid in self._last)
