"""A handler file broken while a real `cronjobs worker` runs (PostgreSQL + Redis): the fork
server started again after the idle one stopped reads the handler folder anew and skips
the file that no longer imports. Rows of the other types run; a row of the broken file's
type uses its attempt (retried with backoff, then `failed` with the import error and its
traceback) instead of cycling `pending` with a start-fail loop, and the worker log says
it once, not once a second."""

from __future__ import annotations

import textwrap
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import REDIS
from cronjobs import queue
from cronjobs.health import run_health
from cronjobs.worker import heartbeat
from test_job_processes_on_demand import fork_servers
from test_worker_e2e import wait_for, worker

pytestmark = [pytest.mark.parametrize("backend", ["postgresql"], indirect=True)]

GOOD = '''
from cronjobs import CronJobHandler


class GoodExecute(CronJobHandler):
    TYPE = "probe.good.execute"

    def handle(self, payload, job):
        return {"success": True}
'''

FLAKY = '''
from cronjobs import CronJobHandler
{extra}

class FlakyExecute(CronJobHandler):
    TYPE = "probe.flaky.execute"
    MAX_ATTEMPTS = 2

    def handle(self, payload, job):
        return {{"success": True}}
'''

COLUMNS = ["status", "attempts", "error", "traceback", "scheduled_at"]


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "handlers"
    folder.mkdir()
    (folder / "GoodExecute.py").write_text(textwrap.dedent(GOOD))
    (folder / "FlakyExecute.py").write_text(textwrap.dedent(FLAKY.format(extra="")))
    return folder


def _row(app, job_id: int) -> dict:
    return queue.get(job_id, COLUMNS, app=app)

@contextmanager
def _running(make_app, db_url: str, namespace: str, tmp_path: Path):
    """A `cronjobs worker` on the probe handlers' folder (job processes idle for 0.3 s),
    once a first good row has completed: `(app, folder, log, proc)`."""
    folder = _folder(tmp_path)
    app = make_app(broker_url=REDIS, handler_paths=(str(folder),))
    log = tmp_path / "worker.log"
    with worker(db_url, namespace, log, threads=2, CRONJOBS_HANDLER_PATHS=str(folder),
                CRONJOBS_JOB_PROCESS_IDLE_SECONDS="0.3") as proc:
        first = queue.dispatch("probe.good.execute", app=app)
        wait_for(lambda: _row(app, first)["status"] == "completed", 30, "the first row",
                 proc, log)
        yield app, folder, log, proc


def test_a_file_broken_while_the_worker_runs_fails_only_its_own_rows(
        make_app, db_url, namespace, tmp_path):
    with _running(make_app, db_url, namespace, tmp_path) as (app, folder, log, proc):
        (folder / "FlakyExecute.py").write_text(
            textwrap.dedent(FLAKY.format(extra="import telemetry_b  # not on the path")))
        # The idle fork server stops; the next row starts a fresh one, which reads the folder.
        wait_for(lambda: fork_servers(proc.pid) == 0, 20, "the idle fork server gone",
                 proc, log)
        flaky = queue.dispatch("probe.flaky.execute", app=app)
        last = queue.dispatch("probe.flaky.execute", max_attempts=1, app=app)
        good = queue.dispatch("probe.good.execute", app=app)
        wait_for(lambda: _row(app, good)["status"] == "completed", 15,
                 "the other type's row", proc, log)
        wait_for(lambda: _row(app, last)["status"] == "failed", 15, "the last attempt",
                 proc, log)
        wait_for(lambda: _row(app, flaky)["attempts"] == 1, 15, "the first attempt", proc, log)
        time.sleep(1.0)  # a start-fail loop would show here: more lines, attempts unchanged
        retried, failed = _row(app, flaky), _row(app, last)
        text = log.read_text()
    assert retried["status"] == "pending" and retried["attempts"] == 1, retried
    assert "No module named 'telemetry_b'" in retried["error"], retried
    due_in = retried["scheduled_at"].replace(tzinfo=None) - datetime.now(UTC).replace(tzinfo=None)
    assert due_in > timedelta(seconds=60), ("retried after the backoff (2 min)", retried)
    assert failed["attempts"] == 1 and "FlakyExecute.py" in failed["error"], failed
    assert "import telemetry_b" in failed["traceback"], failed["traceback"]
    assert text.count("cannot load handler file") == 1, text[-4000:]
    assert "did not start" not in text, text[-4000:]


def _statuses(app) -> list[str]:
    return [row["status"] for row in heartbeat.view(app).live]


def test_job_processes_that_cannot_start_are_said_once_and_the_worker_shows_stalled(
        make_app, db_url, namespace, tmp_path):
    """The handler folder gone (a deploy that moved it): a fresh fork server cannot load
    the handlers, so no job process starts. The row waits (attempt not used), the log says
    why once, the heartbeat says `stalled` (and health fails) until processes start again."""
    with _running(make_app, db_url, namespace, tmp_path) as (app, folder, log, proc):
        folder.rename(tmp_path / "moved")
        wait_for(lambda: fork_servers(proc.pid) == 0, 20, "the idle fork server gone",
                 proc, log)
        waiting = queue.dispatch("probe.good.execute", app=app)
        wait_for(lambda: _statuses(app) == [heartbeat.STALLED], 10, "a stalled heartbeat",
                 proc, log)
        report = run_health(app)
        time.sleep(1.5)  # more failed starts: not more lines
        (tmp_path / "moved").rename(folder)
        wait_for(lambda: _row(app, waiting)["status"] == "completed", 15, "the row", proc, log)
        wait_for(lambda: _statuses(app) == ["running"], 5, "running again", proc, log)
        text = log.read_text()
    assert _row(app, waiting)["attempts"] == 1, "the failed starts used no attempt"
    assert text.count("no job process started for 1 s") == 1, text[-4000:]
    assert "did not start (handler folder" in text and "Traceback" not in text, text[-4000:]
    assert "job processes start again" in text, text[-4000:]
    stalled = [p for p in report.problems if p.key.startswith("stalled:")]
    assert [p.status for p in stalled] == ["fail"], report.problems
