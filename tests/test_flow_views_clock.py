"""What explains a hold (`cronjobs limits`, `health`'s flow line) judges pauses and
blocks as the claims do, on the database's clock: a CLI on a host 60 s ahead still lists
a 40 s pause and a 40 s block made a moment ago (they outlast the CLIs' start-up on a
loaded machine), and one 60 s behind no longer lists a 2 s pause that has ended. Real
`cronjobs` processes under Debian's `faketime`; MariaDB and PostgreSQL (SQLite's clock
is its host's)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from conftest import cli_env
from cronjobs import store
from cronjobs.clock import utcnow
from dashboard_helpers import add_row

pytestmark = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
KIND = "test.summary.execute"


def skewed_cli(args: list[str], env: dict, seconds: int) -> subprocess.CompletedProcess:
    """`cronjobs ARGS` on a host whose wall clock is `seconds` off (its monotonic clock is
    not, as on a host whose clock is wrong)."""
    return subprocess.run(["/usr/bin/faketime", "-f", f"{seconds:+d}s", sys.executable, "-m",
                           "cronjobs", *args], env={**env, "FAKETIME_DONT_FAKE_MONOTONIC": "1"},
                          capture_output=True, text=True, timeout=60)


def flow_state(env: dict, seconds: int) -> tuple[dict, dict]:
    limits = skewed_cli(["limits", "--json"], env, seconds)
    assert limits.returncode == 0, limits.stderr
    health = skewed_cli(["health", "--json"], env, seconds)
    [flow] = [c for c in json.loads(health.stdout)["checks"] if c["name"] == "flow"]
    return json.loads(limits.stdout), flow["data"]


def test_limits_and_health_judge_pauses_and_blocks_on_the_database_clock(make_app, db_url,
                                                                          namespace):
    app = make_app()
    env = cli_env(db_url, namespace)
    add_row(app, queue="held")
    add_row(app, type=KIND, queue="other", limit_key="k")
    with app.engine.begin() as conn:
        now = store.flow.flow_now(conn, app.clock)  # the database's now
        assert abs(now - utcnow()) < timedelta(seconds=30)
        store.flow.pause(conn, "queue", "held", now=now, until=now + timedelta(seconds=40),
                         by="ops")
        store.flow.block(conn, KIND, "k", now=now, until=now + timedelta(seconds=40))

    ahead, health = flow_state(env, +60)
    assert [p["name"] for p in ahead["pauses"]] == ["held"]
    assert [(b["type"], b["limit_key"]) for b in ahead["blocks"]] == [(KIND, "k")]
    assert ahead["held"]["paused"] == 1 and ahead["held"]["blocked"] == 1
    assert (health["pauses"], health["blocks"]) == (1, 1)

    with app.engine.begin() as conn:
        now = store.flow.flow_now(conn, app.clock)
        store.flow.pause(conn, "queue", "short", now=now, until=now + timedelta(seconds=2),
                         by="ops")
    time.sleep(2.5)  # the short pause's own 2 s, by the database's clock
    behind, health = flow_state(env, -60)
    assert [p["name"] for p in behind["pauses"]] == ["held"]
    assert behind["held"]["paused"] == 1 and behind["held"]["blocked"] == 1
    assert (health["pauses"], health["blocks"]) == (1, 1)
