"""A job process keeps its own deadline (`killtimer`): a handler the MAX_RUNTIME alarm
cannot reach (SIGALRM blocked, a C loop holding the interpreter) ends at MAX_RUNTIME +
`KILL_GRACE_SECONDS` even while its worker is frozen (`kill -STOP`), so the rows that
recover-stale takes back once their lease ends run again without a second copy of the
first run: never more than CONCURRENCY at once. When the worker wakes, it reads the
process's end as the `timeout` it is (not a crash); its late outcome is fenced out of a
row another worker ran, and is the row's outcome where no one took the row. Real worker
processes on MariaDB + Redis and on PostgreSQL + Redis, in both isolation modes."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REDIS, effect_rows
from cronjobs import queue
from cronjobs.worker.killtimer import KILL_GRACE_SECONDS
from test_worker_e2e import wait_for as wait_for_worker
from test_worker_e2e import worker

pytestmark = pytest.mark.core  # the core subset (make test-core)

STUCK = "deadline.stuck.execute"
HANDLERS = str(Path(__file__).parent / "deadline_handlers")
MAX_RUNTIME = 2  # the handler's
LIMIT = 2  # its CONCURRENCY
# The lease (MAX_RUNTIME + grace) must outlast the job process's own deadline
# (MAX_RUNTIME + KILL_GRACE_SECONDS): 6 s against 4 s.
ENV = {"CRONJOBS_HANDLER_PATHS": HANDLERS, "CRONJOBS_LEASE_GRACE_SECONDS": "4",
       "CRONJOBS_LOG_LEVEL": "INFO"}
ARMED_BEFORE_START = 0.05  # s: the alarm is armed, then the handler notes its start
SLACK = 1.0  # seconds a loaded machine may take to let the test see an exit


def _in_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_the_kill_timer_ends_a_process_that_blocks_every_signal_in_a_c_loop():
    started = time.monotonic()
    done = _in_child(
        "import signal\n"
        "from cronjobs.worker.killtimer import KillTimer\n"
        "timer = KillTimer.create()\n"
        "assert timer.arm(60) and timer.arm(0.3)  # armed again: the later value holds\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())\n"
        "sum(range(10**12))\n")
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert 0.3 <= time.monotonic() - started < 30


def test_a_disarmed_kill_timer_kills_nothing():
    done = _in_child(
        "import time\n"
        "from cronjobs.worker.killtimer import KillTimer\n"
        "timer = KillTimer.create()\n"
        "assert timer.arm(0.2) and timer.disarm()\n"
        "time.sleep(0.6)\n"
        "print('alive')\n")
    assert (done.returncode, done.stdout) == (0, "alive\n"), done.stderr


class Exits(threading.Thread):
    """Notes when each of `pids` ends (`time.time()`), woken by the kernel (a pidfd), not
    by polling: the instants the concurrency check compares are the real ones."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.fds = {os.pidfd_open(pid): pid for pid in pids}
        self.ended: dict[int, float] = {}

    def run(self) -> None:
        waiting = dict(self.fds)
        while waiting:
            ready, _, _ = select.select(list(waiting), [], [], 120)
            for fd in ready:
                self.ended[waiting.pop(fd)] = time.time()
        for fd in self.fds:
            os.close(fd)


def _starts(app, job_ids: list[int]) -> list[dict]:
    return [r for r in effect_rows(app, "stuck-start") if r["job_id"] in job_ids]


def _most_at_once(runs: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs])
    most = now = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        now += step
        most = max(most, now)
    return most


def _frozen_while_stuck(app, job_ids, proc, log) -> tuple[list[dict], Exits]:
    """Wait for the first runs of `job_ids` to start, freeze the worker (SIGSTOP), and
    watch their job processes end."""
    starts = wait_for_worker(lambda: len(s := _starts(app, job_ids)) == len(job_ids) and s,
                             60, "the stuck handlers' start", proc, log)
    exits = Exits([s["pid"] for s in starts])  # before the freeze: none has ended yet
    os.kill(proc.pid, signal.SIGSTOP)
    exits.start()
    return starts, exits


def _assert_ended_within_deadline(starts: list[dict], exits: Exits) -> None:
    """Each job process of `starts` ended MAX_RUNTIME to MAX_RUNTIME + grace after its
    handler started (a process still running counts until now). The job process arms its
    alarm just before it calls the handler, which notes its start a moment later: the
    lower bound allows that moment (`ARMED_BEFORE_START`)."""
    exits.join(MAX_RUNTIME + KILL_GRACE_SECONDS + 10)
    for start in starts:
        lived = exits.ended.get(start["pid"], time.time()) - start["started"]
        assert MAX_RUNTIME - ARMED_BEFORE_START <= lived <= \
            MAX_RUNTIME + KILL_GRACE_SECONDS + SLACK, \
            f"the job process of job {start['job_id']} lived {lived:.1f} s"


@pytest.mark.slow
@pytest.mark.parametrize("backend,isolation", [("mariadb", "handler"),
                                               ("postgresql", "process")],
                         indirect=["backend"])
def test_a_frozen_workers_job_processes_end_at_max_runtime_plus_grace(
        make_app, db_url, namespace, tmp_path, isolation):
    app = make_app(broker_url=REDIS, handler_paths=(HANDLERS,))
    log, other_log = tmp_path / "frozen.log", tmp_path / "other.log"
    ids = queue.dispatch_many([{"type": STUCK, "payload": {"how": how}}
                               for how in ("sigmask", "c-loop")], app=app)
    with worker(db_url, namespace, log, threads=4, isolation=isolation, **ENV) as frozen:
        # 1. recover-stale takes the rows back while the worker is frozen; another
        #    worker runs them again.
        try:
            starts, exits = _frozen_while_stuck(app, ids, frozen, log)
            with worker(db_url, namespace, other_log, threads=4, isolation=isolation,
                        **ENV) as other:
                def run_again() -> bool:  # recover-stale as often as the check runs
                    queue.recover_stale(0, app=app)
                    return all(queue.get(i, ["status"], app=app)["status"] == "completed"
                               for i in ids)
                wait_for_worker(run_again, 60, "the rows taken back and run again", other,
                                other_log, every=0.05)
            _assert_ended_within_deadline(starts, exits)
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        ends = {r["job_id"]: r for r in effect_rows(app, "stuck-end")}
        runs = [(s["started"], exits.ended[s["pid"]]) for s in starts]
        runs += [(r["started"], r["ended"]) for r in ends.values()]
        assert sorted(ends) == sorted(ids) and _most_at_once(runs) <= LIMIT, runs
        for job_id in ids:  # the woken worker reads a timeout, and its write is fenced out
            wait_for_worker(lambda j=job_id: f"job {j}: lease was lost" in log.read_text(),
                            30, f"job {job_id}'s late outcome", frozen, log)
            assert f"job {job_id}: timeout after 2 s" in log.read_text()
            row = queue.get(job_id, app=app)
            assert (row["status"], row["attempts"]) == ("completed", 2)

        # 2. Nobody took the rows: the woken worker's outcome is the row's, a timeout —
        #    by the kill timer, or by the alarm for a handler it reaches.
        stuck, alarmed = queue.dispatch_many([{"type": STUCK, "payload": {"how": how}}
                                              for how in ("sigmask", "sleep")], app=app)
        try:
            starts, exits = _frozen_while_stuck(app, [stuck, alarmed], frozen, log)
            _assert_ended_within_deadline(starts, exits)
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        for job_id, how in ((stuck, "timeout.killed"), (alarmed, "timeout.alarm")):
            row = wait_for_worker(lambda j=job_id: (r := queue.get(j, app=app))["status"]
                                  != "running" and r, 30, "the timeout written", frozen, log)
            assert (row["status"], row["attempts"], row["outcome_reason"]) == \
                ("pending", 1, how), row
            assert row["error"].startswith("timeout after 2 s"), row["error"]
        assert f"job {stuck}: timeout after 2 s" in log.read_text()
