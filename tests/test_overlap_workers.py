"""With a real worker process running a discover's fan-out, the next slots of the task
(`OVERLAP = "skip"`) start nothing and are recorded once each; once every row of the family
has completed, the next slot starts (MariaDB and PostgreSQL, Redis broker)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from conftest import SAMPLE_HANDLERS, cli_env
from cronjobs.clock import FrozenClock
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue, cronjob_runtime
from test_worker_e2e import REDIS, wait_for

T0 = datetime(2026, 3, 2, 9, 0, 5)
CHILDREN = 6  # 1.5 s each on 2 slots: the family lives >= 4.5 s after its discover

FAN = '''
from cronjobs import CronJobHandler


class FanDiscover(CronJobHandler):
    TYPE = "ovw.fan.discover"
    FREQUENCY = "minute"

    def handle(self, payload, job):
        for n in range({children}):
            self.dispatch("test.sleep.execute", {{"seconds": 1.5, "n": n}})
        return True
'''


def counts(app) -> dict[str, int]:
    q = cronjob_queue
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(q.c.status, sa.func.count()).group_by(q.c.status)
                                 .where(q.c.type.in_(["ovw.fan.discover",
                                                      "test.sleep.execute"]))).all())


def skipped(app) -> tuple:
    rt = cronjob_runtime
    with app.engine.connect() as conn:
        return tuple(conn.execute(sa.select(rt.c.skipped_count, rt.c.last_skipped_slot,
                                            rt.c.last_skip_reason)
                                  .where(rt.c.task == "ovw-fan")).one())


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_skip_holds_the_slots_while_a_worker_runs_the_family(make_app, db_url, namespace,
                                                             tmp_path):
    folder = tmp_path / "handlers"
    folder.mkdir()
    (folder / "FanDiscover.py").write_text(FAN.format(children=CHILDREN))
    paths = f"{SAMPLE_HANDLERS}:{folder}"
    clock = FrozenClock(T0)
    app = make_app(clock=clock, broker_url=REDIS, handler_paths=(SAMPLE_HANDLERS, str(folder)))
    assert ("ovw-fan", "202603020900") in [(t, s) for t, s, _ in tick(T0).started]
    log = tmp_path / "worker.log"
    env = cli_env(db_url, namespace, broker_url=REDIS, CRONJOBS_HANDLER_PATHS=paths,
                  CRONJOBS_LOG_LEVEL="INFO")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cronjobs", "worker", "--queues",
                                 "default", "--slots", "2"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        # the discover has completed and dispatched its children, which are still going
        wait_for(lambda: counts(app).get("completed", 0) >= 1
                 and sum(counts(app).values()) == CHILDREN + 1, 60, "the fan-out", proc, log)
        for minute in (1, 1.5):  # the second tick is in the same slot: counted once
            now = T0 + timedelta(minutes=minute)
            clock.set(now)
            report = tick(now)
            assert "ovw-fan" not in [t for t, _, _ in report.started], counts(app)
        assert skipped(app) == (1, "202603020901", "running")
        wait_for(lambda: counts(app) == {"completed": CHILDREN + 1}, 90,
                 "every row of the family completed", proc, log)
        later = T0 + timedelta(minutes=2)
        clock.set(later)
        assert ("ovw-fan", "202603020902") in [(t, s) for t, s, _ in tick(later).started]
        assert skipped(app) == (1, "202603020901", "running")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
