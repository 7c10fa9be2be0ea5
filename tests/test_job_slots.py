"""A job process or a worker thread ends each job one way, each with its named outcome: the
handler's answer, the process died, stopped by its alarm, killed past MAX_RUNTIME + grace,
cut off by a stopping or a recycling worker, never started; a dead process leaves its slot
and the next job starts a new one, and a thread job given up at MAX_RUNTIME is timed out at
once and its late answer dropped."""

from __future__ import annotations

import json
import threading
import time
from multiprocessing.connection import wait
from pathlib import Path

import pytest

from conftest import SAMPLE_HANDLERS
from cronjobs.handler import Job
from cronjobs.job.context import Runtime
from cronjobs.status import Reason
from cronjobs.worker.procslots import ProcessSlots
from cronjobs.worker.runner import KILL_GRACE_SECONDS
from cronjobs.worker.threadslots import ThreadSlots

pytestmark = pytest.mark.core  # the core subset (make test-core)

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
CRASH_HANDLERS = str(Path(__file__).parent / "crash_handlers")
THREAD_HANDLERS = str(Path(__file__).parent / "thread_handlers")
MISBEHAVE = "test.misbehave.execute"


def job(job_id: int, job_type: str, payload: dict) -> Job:
    return Job.from_row({"id": job_id, "type": job_type, "queue": "default", "status": "running",
                         "payload": json.dumps(payload), "attempts": 1, "max_attempts": 1})


class Slots:
    """One job process, with what it reported."""

    def __init__(self, app) -> None:
        self.reports: list[tuple[Job, object, float]] = []
        self.slots = ProcessSlots(app.settings, Runtime(), 1, stopping=threading.Event(),
                                  report=lambda *report: self.reports.append(report))
        self.slots.start()

    def run(self, sent: Job, max_runtime_seconds: float, timeout: float = 30.0):
        """Send `sent` and turn the loop until its outcome came and a process is idle."""
        self.slots.send(sent, max_runtime_seconds)
        return self.turn(timeout)

    def turn(self, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while not self.reports or (self.slots.procs and not self.slots.idle()):
            assert time.monotonic() < deadline, (self.reports, self.slots.procs)
            due = self.slots.next_deadline()
            pause = 0.05 if due is None else max(0.0, min(0.05, due - time.monotonic()))
            self.slots.serve(wait(self.slots.conns(), pause))
        reported, result, _ = self.reports.pop()
        return reported, result

    def pid(self) -> int:
        return self.slots.procs[0].process.pid


@SQLITE
def test_a_job_process_reports_each_end_with_its_outcome_and_is_replaced(make_app):
    app = make_app(handler_paths=(SAMPLE_HANDLERS, CRASH_HANDLERS))
    one = Slots(app)
    try:
        assert one.slots.procs == [] and one.slots.idle() == 1, "started when a job needs it"
        reported, result = one.run(job(1, MISBEHAVE, {}), 30)
        assert (reported.id, result.kind, result.reason) == (1, "completed", None)
        first = one.pid()
        _, result = one.run(job(11, MISBEHAVE, {}), 30)
        assert one.pid() == first, "a process that answered keeps its slot"
        _, result = one.run(job(2, MISBEHAVE, {"do": "exit"}), 30)
        assert (result.kind, result.error, result.reason) == (
            "failed", "job process died (exit code 3)", Reason.PROCESS_DIED)
        assert one.slots.procs == [], "a dead process leaves its slot"
        _, result = one.run(job(12, MISBEHAVE, {}), 30)
        assert result.kind == "completed" and one.pid() != first, "the next job starts another"
        _, result = one.run(job(3, MISBEHAVE, {"do": "sleep"}), 0.3)
        assert (result.error, result.reason) == (
            "timeout after 0.3 s (MAX_RUNTIME); job stopped, its process replaced",
            Reason.TIMEOUT_ALARM)
        started = time.monotonic()
        _, result = one.run(job(4, MISBEHAVE, {"do": "deaf"}), 0.3)
        assert (result.error, result.reason) == (
            "timeout after 0.3 s (MAX_RUNTIME); job process killed", Reason.TIMEOUT_KILLED)
        assert time.monotonic() - started >= 0.3 + KILL_GRACE_SECONDS
        assert one.run(job(13, MISBEHAVE, {}), 30)[1].kind == "completed"
        idle = one.slots.procs[0].process
        idle.kill()
        idle.join(5)
        _, result = one.run(job(5, MISBEHAVE, {}), 30)
        assert (result.kind, result.reason) == ("cut_off", Reason.NOT_STARTED)
        assert result.log.startswith("job process had died before the job was sent (")
        assert result.log.endswith("); attempt not used")
        _, result = one.run(job(6, MISBEHAVE, {}), 30)
        assert result.kind == "completed", "the replacement takes the next job"
    finally:
        one.slots.close()


@SQLITE
def test_after_starting_a_process_the_outcomes_already_sent_are_read(make_app, monkeypatch):
    # A claim's rows start their processes one after another, each start waiting for the
    # fork server's fork: the first jobs end meanwhile and are reported at once.
    app = make_app(handler_paths=(SAMPLE_HANDLERS, CRASH_HANDLERS))
    two = Slots(app)
    slots, calls = two.slots, []
    read_ready = slots._read_ready
    monkeypatch.setattr(slots, "_read_ready", lambda: calls.append(1) or read_ready())
    try:
        slots.send(job(1, MISBEHAVE, {}), 30)
        assert len(calls) == 1, "read after the start"
        deadline = time.monotonic() + 30
        while not two.reports:  # no serve(): what _read_ready reads without waiting
            assert time.monotonic() < deadline, slots.procs
            read_ready()
        assert [(r[0].id, r[1].kind) for r in two.reports] == [(1, "completed")]
        assert slots.idle() == 1
        slots.send(job(2, MISBEHAVE, {}), 30)  # the idle process: no start, nothing read
        assert len(calls) == 1
        two.turn()
    finally:
        slots.close()


@SQLITE
@pytest.mark.parametrize(("recycle", "expected"), [
    (None, ("cut_off", None, Reason.CUT_OFF_SHUTDOWN)),
    ("memory-limit 1 MB reached (80 MB)",
     ("failed", "cut off when the worker recycled (memory-limit 1 MB reached (80 MB)); attempt "
                "used", Reason.CUT_OFF_RECYCLE)),
])
def test_a_cut_off_says_whether_the_attempt_is_used(make_app, recycle, expected):
    app = make_app(handler_paths=(SAMPLE_HANDLERS, CRASH_HANDLERS))
    one = Slots(app)
    try:
        one.slots.send(job(7, MISBEHAVE, {"do": "sleep"}), 30)
        assert one.slots.running_ids() == [7] and one.slots.busy_count() == 1
        assert one.slots.cut_off(recycle) == [7]
        reported, result = one.turn()
        assert reported.id == 7 and (result.kind, result.error, result.reason) == expected
        assert one.slots.procs == [], "a cut-off process is not replaced"
    finally:
        one.slots.close()


def _thread_ended(job_id: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while any(t.name == f"cronjobs-job-{job_id}" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the thread job did not end"
        time.sleep(0.02)


@SQLITE
def test_a_thread_job_answers_or_is_abandoned_and_its_late_answer_dropped(make_app):
    app = make_app(handler_paths=(SAMPLE_HANDLERS, THREAD_HANDLERS))
    woken = threading.Event()
    threads = ThreadSlots(app, Runtime(), wake=woken.set)
    threads.start(job(1, "test.threadsleep.execute", {"seconds": 0}), 2)
    _thread_ended(1)
    assert woken.is_set()
    [(done, result, _)] = threads.collect()
    assert (done.id, result.kind, result.reason) == (1, "completed", None)
    threads.start(job(2, "test.threadsleep.execute", {"seconds": 1}), 2)
    assert threads.running_ids() == [2] and threads.busy_count() == 1
    assert threads.abandon_overdue(grace_seconds=60) == []  # not overdue yet
    [given_up] = threads.abandon_overdue(grace_seconds=-10)  # as if 10 s past MAX_RUNTIME
    assert given_up.id == 2 and threads.busy_count() == 0
    [(_, result, _)] = threads.collect()
    assert (result.error, result.reason) == (
        "timeout after 2 s (MAX_RUNTIME); thread job abandoned, worker recycling",
        Reason.TIMEOUT_ABANDONED)
    _thread_ended(2)
    assert threads.collect() == [], "the abandoned job's late answer is dropped"
