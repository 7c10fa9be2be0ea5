"""Idempotency keys under real concurrency: one row per key, every caller gets
that row's id — also when the first inserter's transaction rolls back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from cronjobs.store.models import cronjob_queue

PROCS = Path(__file__).parent / "procs"
RACE_BACKENDS = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)


def rows_by_key(db_url: str) -> dict[str, int]:
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(cronjob_queue.c.idempotency_key, cronjob_queue.c.id)).all()
    engine.dispose()
    return {k: i for k, i in rows}


@RACE_BACKENDS
def test_eight_processes_fifty_dispatches_forty_keys(db_url):
    start_at = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, str(PROCS / "dispatch_keys.py"), db_url, str(w),
                               "50", "40", str(start_at)], stdout=subprocess.PIPE, text=True)
             for w in range(8)]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        results.extend(json.loads(out))
    assert len(results) == 400
    table = rows_by_key(db_url)
    used = {key for key, _ in results}
    assert len(table) == len(used)
    assert len(used) == 40, "the seeded plans cover all 40 keys"
    wrong = [(key, got, table[key]) for key, got in results if table[key] != got]
    assert wrong == []


@RACE_BACKENDS
def test_first_inserter_rolls_back_while_others_wait(db_url, tmp_path):
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, str(PROCS / "dispatch_rollback.py"), db_url,
                               "holder", "k-rollback", str(ready)],
                              stdout=subprocess.PIPE, text=True)
    waiters = [subprocess.Popen([sys.executable, str(PROCS / "dispatch_rollback.py"), db_url,
                                 "waiter", "k-rollback", str(ready)],
                                stdout=subprocess.PIPE, text=True)
               for _ in range(4)]
    outs = []
    for proc in [holder, *waiters]:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        outs.append(json.loads(out))
    table = rows_by_key(db_url)
    assert list(table) == ["k-rollback"], "exactly one real row for the key"
    real_id = table["k-rollback"]
    holder_out, waiter_outs = outs[0], outs[1:]
    assert holder_out["sent"] == [], "a rolled-back dispatch sends nothing"
    assert holder_out["id"] != real_id
    assert all(w["id"] == real_id for w in waiter_outs), waiter_outs
    senders = Counter(len(w["sent"]) for w in waiter_outs)
    assert senders == Counter({1: 1, 0: 3}), "only the caller that inserted sends a message"
