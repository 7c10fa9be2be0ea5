"""Concurrent `cronjobs failed --retry` processes on MariaDB and PostgreSQL: exactly one
operation runs, the others are refused naming it, and every row is reset once."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from conftest import cli_env
from cronjobs.actions import bulk
from cronjobs.store.models import cronjob_operation
from cronjobs.store.models import cronjob_queue as q
from dashboard_helpers import add_rows

pytestmark = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
REFUSED = re.compile(r"error: a retry of this selection is already running \(operation 1, "
                     r"[\d,]+ of 5,000 done, started by cli on [^)]+\)\n")


def test_concurrent_cli_retries_run_one_operation(make_app, db_url, tmp_path):
    app = make_app()
    add_rows(app, 5000, status="failed", error="HTTP 503", attempts=3, process_logs="old\n")
    with app.engine.connect() as conn:
        ids = [r[0] for r in conn.execute(sa.select(q.c.id).order_by(q.c.id))]
    # Another transaction holds one row of the third batch: whoever runs the operation
    # waits there, with 1,000 of 5,000 done, while the others start.
    blocker = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    conn = blocker.connect()
    tx = conn.begin()
    conn.execute(sa.select(q.c.id).where(q.c.id == ids[1200]).with_for_update()).all()
    procs = [subprocess.Popen([sys.executable, "-m", "cronjobs", "failed", "--retry"],
                              env=cli_env(db_url), cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    try:
        deadline = time.monotonic() + 90
        while sum(p.poll() is not None for p in procs) < 3:
            assert time.monotonic() < deadline, [p.poll() for p in procs]
            time.sleep(0.05)
        while bulk.get(app, 1)["done_rows"] < 1000:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        op = bulk.get(app, 1)
        assert (op["status"], op["done_rows"], op["stalled"]) == ("running", 1000, False)
        assert [p.poll() for p in procs].count(None) == 1
    finally:
        tx.rollback()
        conn.close()
        blocker.dispose()
    outputs = [(p.wait(60), *p.communicate()) for p in procs]
    won = [o for o in outputs if o[0] == 0]
    refused = [o for o in outputs if o[0] != 0]
    assert len(won) == 1 and won[0][1] == "retried 5000 failed row(s)\n", outputs
    assert len(refused) == 3
    for code, out, err in refused:
        assert code == 2 and out == "" and REFUSED.fullmatch(err), err
    with app.engine.connect() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(cronjob_operation)).scalar() == 1
        rows = c.execute(sa.select(q.c.status, q.c.attempts, q.c.process_logs)).all()
    assert all(r.status == "pending" and r.attempts == 0 for r in rows)
    assert [r.process_logs.count("retried by cli (operation 1)") for r in rows] == [1] * 5000
