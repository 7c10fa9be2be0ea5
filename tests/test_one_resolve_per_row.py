"""A claimed row is resolved once and crosses the executor twice: the worker's pool (and
its group commit) run a row with one `Executor.prepare` (made from the terms the claim
resolved once per type) and one `Executor.done`, besides the claim itself (once per
claim, not per row); `App.resolve` runs once per row in the worker's process, in a job
process and in a thread job alike."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from conftest import SAMPLE_HANDLERS
from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.job.executor import Executor
from cronjobs.worker.pool import SlotPool

pytestmark = pytest.mark.core  # the core subset (make test-core)

THREAD_HANDLERS = str(Path(__file__).parent / "thread_handlers")
ROWS = 6
T0 = datetime(2026, 8, 8, 8, 0, 0)


class CountingExecutor(Executor):
    """An Executor that counts the calls made into it from outside (the pool and the group
    commit), per method; calls it makes into itself are not counted."""

    def __init__(self, *args, **kwargs) -> None:
        self.calls: Counter = Counter()
        self._inside = threading.local()
        super().__init__(*args, **kwargs)

    def __getattribute__(self, name: str):
        found = super().__getattribute__(name)
        if name.startswith("_") or not callable(found) or not hasattr(found, "__self__"):
            return found
        inside = super().__getattribute__("_inside")

        def counted(*args, **kwargs):
            outer = not getattr(inside, "depth", 0)
            if outer:
                super(CountingExecutor, self).__getattribute__("calls")[name] += 1
            inside.depth = getattr(inside, "depth", 0) + 1
            try:
                return found(*args, **kwargs)
            finally:
                inside.depth -= 1

        return counted


def run_pool(app, executor: Executor, slots: int) -> SlotPool:
    pool = SlotPool(executor, slots, until_empty=True, claim_ahead=0)
    pool.ring("default")
    pool.start()
    deadline = time.monotonic() + 60
    while not pool.emptied.is_set() and time.monotonic() < deadline:
        assert not pool.failed.is_set()
        time.sleep(0.02)
    pool.close("test")
    assert pool.emptied.is_set(), "the pool did not drain its rows within 60 s"
    return pool


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("job_type", "isolation"), [
    ("test.shape.execute", "process"), ("test.threadsleep.execute", "handler")],
    ids=["job-process", "thread"])
def test_a_row_run_by_the_pool_is_resolved_once_and_crosses_the_executor_twice(
        make_app, job_type, isolation):
    app = make_app(clock=FrozenClock(T0), handler_paths=(SAMPLE_HANDLERS, THREAD_HANDLERS))
    payload = {"shape": "true"} if job_type == "test.shape.execute" else {"seconds": 0}
    ids = queue.dispatch_many([{"type": job_type, "payload": payload}] * ROWS)
    resolved: list[str] = []
    resolve = app.resolve
    app.resolve = lambda t: (resolved.append(t), resolve(t))[1]  # this App only
    executor = CountingExecutor(app, "count:1", isolation=isolation)
    pool = run_pool(app, executor, 1)  # one slot: one row per claim, the costliest case
    assert [queue.get(i, ["status"])["status"] for i in ids] == ["completed"] * ROWS
    per_row = {name: n for name, n in executor.calls.items() if name != "claim_rows"}
    assert per_row == {"prepare": ROWS, "done": ROWS}, executor.calls
    assert sum(per_row.values()) <= 2 * ROWS
    assert executor.calls["claim_rows"] == pool.claims  # once per claim statement
    assert len(resolved) == ROWS, resolved  # once per row (one row per claim here)
