"""A dead worker (killed, its heartbeat old) is listed with the rows it still holds, not
with the jobs of its last heartbeat: once recover-stale has taken them back and another
worker has run them, `cronjobs workers` no longer shows them under the dead one."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from cronjobs import queue
from cronjobs.store.models import cronjob_queue as q
from cronjobs.store.models import cronjob_worker as w
from cronjobs.worker.heartbeat import view

OLD = datetime(2020, 1, 1)


def test_a_dead_worker_shows_the_rows_it_still_holds(make_app):
    app = make_app()
    ids = [queue.dispatch("test.shape.execute", {}) for _ in range(4)]
    with app.engine.begin() as conn:
        conn.execute(w.insert().values(
            id="gone:1", host="gone", pid=1, queues="default", status="running",
            started_at=OLD, last_seen_at=OLD + timedelta(minutes=5), jobs_done=7,
            current_jobs=",".join(map(str, ids[:3])),
            job_slots=",".join(f"{job_id}:{slot}" for slot, job_id in enumerate(ids[:3]))))
        conn.execute(q.update().where(q.c.id.in_([ids[0], ids[2]])).values(
            status="running", worker_id="gone:1", started_at=OLD))
        conn.execute(q.update().where(q.c.id == ids[1]).values(
            status="completed", worker_id="alive:2", finished_at=OLD))
    seen = view(app)
    assert [r["id"] for r in seen.dead] == ["gone:1"] and seen.live == []
    assert seen.dead[0]["current_jobs"] == f"{ids[0]},{ids[2]}"
    assert seen.dead[0]["job_slots"] == f"{ids[0]}:0,{ids[2]}:2"
    with app.engine.begin() as conn:  # recover-stale took them back
        conn.execute(q.update().where(q.c.worker_id == "gone:1").values(
            status="pending", worker_id=None))
    assert view(app).dead[0]["current_jobs"] is None
    assert view(app).dead[0]["job_slots"] is None
    with app.engine.connect() as conn:  # the stored heartbeat itself is left as it was
        assert conn.execute(sa.select(w.c.current_jobs)).scalar_one() == ",".join(
            map(str, ids[:3]))
