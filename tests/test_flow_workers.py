"""Flow control with real `cronjobs worker` processes on MariaDB and PostgreSQL (Redis
broker): CONCURRENCY per LIMIT_KEY holds across two workers (a sampler never sees more
than N running per key, every row runs once); RATE_LIMIT holds across two workers over
every rolling second of the claims; kill -9 of a worker holding limited slots frees them
once recover-stale takes the leases back, and its late outcome changes nothing; a flood
wait blocks its key while other keys run, attempts unchanged; a blocked backlog at the
head of the queue does not hold other keys up; a pause made from the CLI holds for a
worker started afterwards, resume releases the rows in their order, `--for` ends alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import REDIS, cli_env, run_cli
from cronjobs import queue, store
from cronjobs.store.models import cronjob_queue as q
from test_worker_e2e import worker

pytestmark = [pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True),
              pytest.mark.slow]

FLOW_HANDLERS = str(Path(__file__).parent / "flow_handlers")
ENV = {"CRONJOBS_HANDLER_PATHS": FLOW_HANDLERS, "CRONJOBS_LEASE_GRACE_SECONDS": "2",
       "CRONJOBS_SWEEP_AFTER_SECONDS": "3", "CRONJOBS_SWEEP_INTERVAL_SECONDS": "1"}
KEYED, RATED, FLOOD, KEYONLY = ("flow.keyed.execute", "flow.rated.execute",
                                "flow.flood.execute", "flow.keyonly.execute")


@pytest.fixture
def app(make_app):
    return make_app(handler_paths=(FLOW_HANDLERS,), lease_grace_seconds=2)


def statuses(app) -> dict[str, int]:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(q.c.status, sa.func.count())
                                 .group_by(q.c.status)).all())


def wait_for(check, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise AssertionError(f"{what}: not within {timeout} s\n{tail}")


def completed(app, n: int):
    return lambda: statuses(app).get("completed", 0) == n


def rows(app, *columns, where=None):
    stmt = sa.select(*[q.c[c] for c in columns]).order_by(q.c.id)
    if where is not None:
        stmt = stmt.where(where)
    with app.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(stmt)]


class Sampler(threading.Thread):
    """Reads the running rows per limit key every 50 ms; keeps the highest count."""

    def __init__(self, app) -> None:
        super().__init__(daemon=True)
        self.app, self.most, self.samples = app, 0, 0
        self.done = threading.Event()

    def run(self) -> None:
        stmt = sa.select(q.c.limit_key, sa.func.count()).where(
            q.c.status == "running").group_by(q.c.limit_key)
        with self.app.engine.connect() as conn:
            while not self.done.is_set():
                counts = [n for _, n in conn.execute(stmt)]
                conn.rollback()
                self.most = max([self.most, *counts])
                self.samples += 1
                time.sleep(0.05)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.join(5)


def test_concurrency_per_key_across_two_workers(app, db_url, namespace, tmp_path):
    queue.dispatch_many([{"type": KEYED, "payload": {"chat": f"c{i % 5}", "seconds": 0.3}}
                         for i in range(200)])
    log = tmp_path / "workers.log"
    with Sampler(app) as sampler, worker(db_url, namespace, log, threads=8, **ENV), \
            worker(db_url, namespace, log, threads=8, **ENV):
        wait_for(completed(app, 200), 60, "200 rows completed", log)
    assert sampler.samples > 50 and sampler.most == 2
    assert set(rows(app, "status", "attempts")) == {("completed", 1)}


def test_rate_limit_across_two_workers(app, db_url, namespace, tmp_path):
    queue.dispatch_many([{"type": RATED} for _ in range(35)])
    log = tmp_path / "workers.log"
    with worker(db_url, namespace, log, threads=4, **ENV), \
            worker(db_url, namespace, log, threads=4, **ENV):
        wait_for(completed(app, 35), 30, "35 rows completed", log)
    starts = sorted(t for (t,) in rows(app, "started_at"))
    busiest = max(sum(1 for t in starts[i:] if t - s < timedelta(seconds=1))
                  for i, s in enumerate(starts))
    assert busiest <= 10
    assert starts[-1] - starts[0] >= timedelta(seconds=3)  # 35 starts need 4 windows


def test_kill_9_frees_limited_slots_after_recover_stale(app, db_url, namespace, tmp_path):
    ids = queue.dispatch_many([{"type": KEYED, "payload": {"chat": "k", "seconds": 3}}
                               for _ in range(4)])
    log = tmp_path / "workers.log"
    with open(log, "ab") as out:
        victim = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--slots", "4"],
                                  env=cli_env(db_url, namespace, broker_url=REDIS, **ENV),
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: statuses(app).get("running") == 2, 30, "2 rows running", log)
    finally:
        os.killpg(victim.pid, signal.SIGKILL)  # the worker and its job processes
        victim.wait(10)
    killed = rows(app, "id", "attempts", where=q.c.status == "running")
    assert len(killed) == 2
    log2 = tmp_path / "second.log"
    with Sampler(app) as sampler, worker(db_url, namespace, log2, threads=4, **ENV):
        time.sleep(1)
        assert statuses(app).get("running") == 2  # the dead worker's rows hold the limit
        # The lease (MAX_RUNTIME 4 s + 2 s grace) ends; one recover-stale run frees them.
        wait_for(lambda: queue.recover_stale(0, app=app) or statuses(app).get("running") != 2,
                 15, "the killed rows taken back", log2)
        wait_for(completed(app, 4), 40, "4 rows completed", log2)
    assert sampler.most == 2
    with app.engine.begin() as conn:  # the killed run's late outcome is fenced out
        assert not store.finish_job(conn, killed[0][0], killed[0][1], {"status": "failed"})
    assert rows(app, "status", where=q.c.id.in_(ids)) == [("completed",)] * 4


def test_flood_wait_blocks_its_key_while_other_keys_run(app, db_url, namespace, tmp_path):
    flood = queue.dispatch(FLOOD, {"chat": "A", "flood": 3}, priority=1)
    queue.dispatch_many([{"type": FLOOD, "payload": {"chat": chat}}
                         for chat in ("A", "B") * 10])
    log = tmp_path / "workers.log"
    with worker(db_url, namespace, log, threads=4, **ENV):
        wait_for(completed(app, 21), 30, "21 rows completed", log)
    with app.engine.connect() as conn:
        until = conn.execute(sa.text("SELECT until_at FROM cronjob_block")).scalar_one()
    a_starts = [t for i, t, key in rows(app, "id", "started_at", "limit_key") if key == "A"]
    b_starts = [t for i, t, key in rows(app, "id", "started_at", "limit_key") if key == "B"]
    assert min(a_starts) >= until  # the flood row ran again after its block, the rest too
    assert max(b_starts) < until  # B did not wait for A's block
    assert set(rows(app, "status", "attempts")) == {("completed", 1)}
    assert "blocks the key" in queue.get(flood, ["process_logs"], app=app)["process_logs"]


def test_a_blocked_backlog_does_not_hold_other_keys(app, db_url, namespace, tmp_path):
    with app.engine.begin() as conn:
        store.block(conn, KEYONLY, "hot", now=app.clock.now(),
                    until=app.clock.now() + timedelta(minutes=5), reason="FloodWait")
    queue.dispatch_many([{"type": KEYONLY, "payload": {"chat": "hot"}, "priority": 1}
                         for _ in range(2000)])
    queue.dispatch_many([{"type": KEYONLY, "payload": {"chat": "cold"}, "priority": 5}
                         for _ in range(50)])
    log = tmp_path / "workers.log"
    with worker(db_url, namespace, log, threads=8, **ENV):
        wait_for(completed(app, 50), 30, "the 50 rows of the other key", log)
    cold = sorted(t for t, key in rows(app, "finished_at", "limit_key") if key == "cold")
    assert cold[-1] - cold[0] < timedelta(seconds=5)
    assert statuses(app) == {"pending": 2000, "completed": 50}


def test_a_cli_pause_holds_a_later_worker_and_resume_keeps_order(app, db_url, namespace,
                                                                  tmp_path):
    env = cli_env(db_url, namespace, **ENV)
    paused = run_cli(["pause", "--queue", "default", "--reason", "incident"], env)
    assert paused.returncode == 0, paused.stderr
    ids = [queue.dispatch(KEYONLY, {"chat": f"c{i}"}, priority=9 - i % 3) for i in range(12)]
    log = tmp_path / "workers.log"
    with worker(db_url, namespace, log, threads=1, **ENV):
        time.sleep(2)
        assert statuses(app) == {"pending": 12}
        assert run_cli(["resume", "--queue", "default"], env).returncode == 0
        wait_for(completed(app, 12), 20, "12 rows completed after resume", log)
        # (finish times: rows claimed ahead share their claim's `started_at`)
        order = [i for i, _ in sorted(rows(app, "id", "finished_at"), key=lambda r: r[1])]
        assert order == sorted(ids, key=lambda i: (9 - (i - ids[0]) % 3, i))
        short = run_cli(["pause", "--type", KEYONLY, "--for", "2s"], env)
        assert short.returncode == 0 and "until 20" in short.stdout, short.stderr
        later = queue.dispatch(KEYONLY, {"chat": "x"})
        time.sleep(1)
        assert queue.get(later, ["status", "attempts"], app=app) == {
            "status": "pending", "attempts": 0}
        wait_for(completed(app, 13), 10, "the row after the pause ended", log)
