"""RATE_LIMIT spreads the starts over the window: with `RATE_LIMIT = "10/s"`, three
`cronjobs worker` processes (job processes, as in production) and 100 rows, at most 11
handler starts fall in any rolling second, timestamps taken inside the handler (the claims
are spaced 0.1 s apart, never more than 10 in a rolling second; a job process's start
jitter may bring one more into a second). MariaDB and PostgreSQL, Redis broker. The five
runs of 300 rows per backend are `make bench BENCH_ARGS="--only rate"`."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import REDIS
from cronjobs import queue
from cronjobs.store.models import cronjob_queue as q
from cronjobs.store.models import cronjob_worker
from test_worker_e2e import worker

pytestmark = [pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True),
              pytest.mark.slow]

FLOW_HANDLERS = str(Path(__file__).parent / "flow_handlers")
STAMPED, ROWS = "flow.stamped.execute", 100


def busiest_second(stamps: list[float]) -> int:
    """The most of `stamps` (seconds) within any rolling second (half-open)."""
    stamps = sorted(stamps)
    return max(sum(1 for t in stamps[i:] if t - s < 1.0) for i, s in enumerate(stamps))


def live_workers(app) -> int:
    """Workers whose heartbeat says they are running."""
    with app.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(cronjob_worker).where(
            cronjob_worker.c.status == "running")).scalar_one()


def test_a_rate_spreads_handler_starts_across_three_workers(make_app, db_url, namespace,
                                                             tmp_path):
    app = make_app(handler_paths=(FLOW_HANDLERS,), broker_url=REDIS)
    log = tmp_path / "workers.log"
    with ExitStack() as stack:
        for _ in range(3):
            stack.enter_context(worker(db_url, namespace, log, threads=4, isolation="process",
                                       CRONJOBS_HANDLER_PATHS=FLOW_HANDLERS))
        up = time.monotonic() + 60  # all three take part: the rows come once each runs
        while live_workers(app) < 3 and time.monotonic() < up:
            time.sleep(0.2)
        assert live_workers(app) == 3, log.read_text()[-3000:]
        ids = queue.dispatch_many([{"type": STAMPED} for _ in range(ROWS)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with app.engine.connect() as conn:
                done = conn.execute(sa.select(sa.func.count()).where(
                    q.c.id.in_(ids), q.c.status == "completed")).scalar_one()
            if done == ROWS:
                break
            time.sleep(0.5)
    assert done == ROWS, log.read_text()[-3000:]
    with app.engine.connect() as conn:
        results = [json.loads(r) if isinstance(r, str) else r for (r,) in conn.execute(
            sa.select(q.c.result_payload).where(q.c.id.in_(ids)))]
        workers = dict(conn.execute(sa.select(q.c.worker_id, sa.func.count()).where(
            q.c.id.in_(ids)).group_by(q.c.worker_id)).all())
    stamps = sorted(r["t"] for r in results)
    assert busiest_second(stamps) <= 11
    assert stamps[-1] - stamps[0] >= (ROWS - 1) * 0.1 - 0.1  # spaced, not bunched
    # the claims of several processes share the rate (which of them wins each spaced
    # start is a race on the limiter's lock: one may win none)
    assert len(workers) >= 2, workers
