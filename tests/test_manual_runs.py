"""Manual runs: Run now and `cronjobs tasks run` are one code path with a
per-request token; a repeated request within milliseconds gives one row; the CLI refuses a
second manual run while one is pending (naming its id) unless --again; `cronjobs tasks`
shows the last scheduled and the last manual run apart; the slot is never taken."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest

from conftest import cli_env
from cronjobs.errors import ManualRunPending, TaskRefused
from cronjobs.schedule.manual import run_now
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.taskrows import cli_row, task_rows
from cronjobs.schedule.tasks import set_enabled
from cronjobs.testing import FrozenClock
from dashboard_helpers import T0, count, row

BOTH = pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)
SERVERS = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)


def cli(env, *args):
    return subprocess.Popen([sys.executable, "-m", "cronjobs", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@BOTH
def test_two_cli_runs_at_once_give_one_row_and_a_refusal_naming_it(db_url, make_app, tmp_path):
    app = make_app()
    env = cli_env(db_url)
    procs = [cli(env, "tasks", "run", "test-count") for _ in range(2)]  # started ~ms apart
    outs = [(p.wait(60), *p.communicate()) for p in procs]
    ok = [o for o in outs if o[0] == 0]
    refused = [o for o in outs if o[0] == 2]
    assert len(ok) == 1 and len(refused) == 1, outs
    job_id = int(ok[0][1])
    assert refused[0][2].strip() == (f"error: a manual run of task 'test-count' is already "
                                     f"pending: job {job_id} (use --again to start another)")
    assert count(app, type="test.count.discover") == 1
    # --again is a deliberate second run
    again = cli(env, "tasks", "run", "test-count", "--again")
    code, out, err = again.wait(60), *again.communicate()
    assert code == 0, err
    assert int(out) != job_id and count(app, type="test.count.discover") == 2
    # the table: last scheduled run and last manual run in separate columns; NEXT_RUN_AT
    # comes from the real clock, so the listing and the rows below are read within one
    # minute (read again when a minute boundary fell between them)
    for _ in range(3):
        minute = datetime.now(UTC).replace(second=0, microsecond=0)
        listing = cli(env, "tasks")
        code, out, err = listing.wait(60), *listing.communicate()
        assert code == 0, err
        mine = next(r for r in task_rows(app) if r.task == "test-count")
        if datetime.now(UTC).replace(second=0, microsecond=0) == minute:
            break
    header, *lines = out.splitlines()
    assert header.split() == ["TASK", "TYPE", "FREQUENCY", "ENABLED", "AVAILABLE", "SOURCE",
                              "LAST_RUN_AT", "LAST_JOB", "LAST_STATUS", "FAMILY", "NEXT_RUN_AT",
                              "LAST_MANUAL_AT", "MANUAL_JOB", "MANUAL_STATUS", "AFTER", "OVERLAP",
                              "SKIPPED", "LAST_SKIPPED", "SKIP_REASON", "BUFFERED", "LIMITS",
                              "PAUSED", "ZONE"]
    assert mine.last_job_id is None and mine.last_run_at is None
    assert mine.last_manual_status == "pending" and mine.last_manual_job_id != job_id
    line = next(row for row in lines if row.startswith("test-count "))
    cells = cli_row(mine)
    starts = [header.index(h) for h in header.split()]
    parsed = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None], strict=True)]
    assert parsed == list(cells.values())  # the CLI prints the shared row builder's row


@SERVERS
def test_eight_threads_at_once_start_one_manual_run(make_app):
    app = make_app()
    run_now("test-count", app=app)  # create the runtime row first, then clear the pending run
    first = row(app, app_last_manual(app))
    from cronjobs.actions import operator

    operator.cancel(app, first["id"])
    results, barrier = [], threading.Barrier(8)

    def go() -> None:
        barrier.wait()
        try:
            results.append(run_now("test-count", app=app).id)
        except ManualRunPending as exc:
            results.append(("refused", exc.job_id))

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    created = [r for r in results if isinstance(r, int)]
    assert len(created) == 1, results
    assert results.count(("refused", created[0])) == 7
    assert count(app, type="test.count.discover", status="pending") == 1


def app_last_manual(app) -> int:
    return next(r for r in task_rows(app) if r.task == "test-count").last_manual_job_id


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_same_token_same_row_and_the_schedule_never_moves(make_app):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    a = run_now("test-count", request_token="req-0000001", app=app)
    b = run_now("test-count", request_token="req-0000001", app=app)
    assert (a.id, a.created) == (b.id, True) and b.created is False
    report = tick(T0 + timedelta(seconds=10), app=app)  # the slot of this minute still runs
    assert [s for t, s, _ in report.started if t == "test-count"] == ["202601051200"]
    mine = next(r for r in task_rows(app) if r.task == "test-count")
    assert mine.last_manual_job_id == a.id and mine.last_job_id != a.id
    assert mine.next_run_at == T0.replace(second=0) + timedelta(minutes=1)
    set_enabled("test-count", False, app=app)
    with pytest.raises(TaskRefused, match="disabled"):
        run_now("test-count", again=True, app=app)
    with pytest.raises(TaskRefused, match="not installed"):
        run_now("test-gone", app=app)
