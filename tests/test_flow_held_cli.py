"""`cronjobs limits` lists the due rows held now per queue, type and reason, and `--json`
counts them by reason under `"held"` (`rate_limited`, `limited`, `paused`, `blocked`: the
contract); `cronjobs health`'s `flow` line says the same, naming the rate limit. Real
claims (`testing.drain`) fill a 5/h rate first; on SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import SAMPLE_HANDLERS, cli_env, run_cli
from cronjobs import queue, store
from cronjobs.testing import drain
from dashboard_helpers import add_row

HELD_HANDLERS = str(Path(__file__).parent / "held_handlers")
HOURLY, SOLO, KIND = "held.hourly.execute", "held.solo.execute", "test.summary.execute"


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_limits_and_health_count_held_rows_by_reason(make_app, db_url, namespace):
    app = make_app(handler_paths=(SAMPLE_HANDLERS, HELD_HANDLERS))
    env = cli_env(db_url, namespace,
                  CRONJOBS_HANDLER_PATHS=f"{SAMPLE_HANDLERS}{os.pathsep}{HELD_HANDLERS}")
    queue.dispatch_many([{"type": HOURLY} for _ in range(8)])
    ran = drain(app, ["hourly"])  # the claim, as a worker's: what the 5/h rate admits now
    limited = ran.waiting.held  # every row the rate admits no start of this hour
    assert len(ran) + limited == 8 and 0 < len(ran) <= 5
    add_row(app, type=SOLO, queue="solo", limit_key="a", status="running")
    for chat in ("a", "a", "b"):
        add_row(app, type=SOLO, queue="solo", limit_key=chat)
    add_row(app)
    now = app.clock.now()
    with app.engine.begin() as conn:
        store.flow.pause(conn, "type", KIND, now=now, by="ops@h")
        store.flow.block(conn, SOLO, "b", now=now, until=now + timedelta(hours=1))

    data = json.loads(run_cli(["limits", "--json"], env).stdout)
    assert data["held"] == {"rate_limited": limited, "limited": 2, "paused": 1, "blocked": 1}
    assert list(data["held"]) == ["rate_limited", "limited", "paused", "blocked"]
    first = data["held_rows"][0]
    assert (first["queue"], first["type"], first["reason"], first["rows"], first["limits"]) == (
        "hourly", HOURLY, "rate_limited", limited, ["5/h on held.hourly.execute"])
    assert first["oldest_due_at"].endswith("Z")

    text = run_cli(["limits"], env)
    assert text.returncode == 0, text.stderr
    held = text.stdout[text.stdout.index(f"HELD: {limited + 4} due row(s)"):].splitlines()
    assert held[1].split() == ["QUEUE", "TYPE", "REASON", "ROWS", "OLDEST_DUE_AT", "LIMITS"]
    assert held[2].split()[:4] == ["hourly", HOURLY, "rate-limited", str(limited)]
    assert held[2].endswith("5/h on held.hourly.execute")
    assert held[3].split()[:4] == ["solo", SOLO, "limited", "2"]
    assert held[3].endswith("1 at once per chat on held.solo.execute")

    report = json.loads(run_cli(["health", "--json"], env).stdout)
    [flow] = [c for c in report["checks"] if c["name"] == "flow"]
    assert flow["message"] == (
        f"1 pause(s), 1 block(s); held rows: {limited} rate-limited (5/h on "
        "held.hourly.execute), "
        "2 limited (1 at once per chat on held.solo.execute), 1 paused, 1 blocked")
    assert flow["data"]["held_rows"] == data["held"]
