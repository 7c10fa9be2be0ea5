"""On SIGTERM each long-running command says what it stops: the dashboard its requests,
`serve` its ticks and jobs (the scheduler's own line is checked in
test_scheduler_faults.py); none says the worker's line when it has no jobs to finish."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from conftest import cli_env
from dashboard_process import Dashboard
from test_worker_e2e import _tail, wait_for

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@SQLITE
def test_sigterm_makes_the_dashboard_say_what_it_stops(db_url, tmp_path):
    dashboard = Dashboard(cli_env(db_url, CRONJOBS_LOG_LEVEL="INFO"), tmp_path).wait_ready()
    assert dashboard.stop() == 0
    text = (tmp_path / "dashboard.log").read_text()
    assert "received SIGTERM: dashboard: stopping; no new requests" in text, text
    assert "no new jobs" not in text


@SQLITE
def test_sigterm_makes_serve_say_it_stops_ticks_and_jobs(db_url, tmp_path):
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "serve", "--port", "0",
                                 "--slots", "1"], env=cli_env(db_url, CRONJOBS_LOG_LEVEL="INFO"),
                                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: "cronjobs is running" in _tail(log), 60, "serve started", proc, log)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text
    assert ("received SIGTERM: serve: stopping; no new ticks, no new jobs, finishing the "
            "running ones") in text, text
