"""What the views call held is exactly what a claim refuses: 50 random configurations
(seeded, reproducible) of handler limits (CONCURRENCY, RATE_LIMIT, LIMIT_KEY), queue
limits, pauses (queue, type, task; live and ended), blocks (whole type, one key; live and
ended), rows running, rate starts in the window and due, not yet due and prioritised
rows. For each, the held rows of `flowstate.held_now` (the dashboard's /flow, `cronjobs
limits`, health and /metrics) per queue and type equal the due rows a claim of every queue
with room for all of them leaves pending; and a claim with fewer slots takes the first
of the rows the full claim takes, in claim order, as many as its slots allow. On SQLite,
MariaDB and PostgreSQL, with a frozen clock."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from cronjobs import queue, store
from cronjobs.clock import FrozenClock
from cronjobs.flow import state as flowstate
from cronjobs.handler import CronJobHandler
from cronjobs.job.executor import Executor
from cronjobs.store.models import cronjob_block, cronjob_flow_start, cronjob_pause, cronjob_queue

T0 = datetime(2026, 7, 7, 7, 0, 0)
CONFIGS = 50
RATES = ("1/s", "3/s", "2/m", "5/h")
KEYS = ("a", "b", "c", None)


def make_handler(job_type: str, queue_name: str, rng: random.Random) -> type:
    attrs = {"TYPE": job_type, "QUEUE": queue_name, "handle": lambda self, payload, job: True}
    if rng.random() < 0.5:
        attrs["CONCURRENCY"] = rng.randint(1, 3)
    if rng.random() < 0.35:
        attrs["RATE_LIMIT"] = rng.choice(RATES)
    if rng.random() < 0.5:
        attrs["LIMIT_KEY"] = "k"
    return type(f"Random{job_type.split('.')[1]}", (CronJobHandler,), attrs)


def configure(make_app, n: int):
    """Configuration `n`: an App with its queue limits and handlers, and its rows, pauses,
    blocks and starts written. Returns `(app, queues, types)`."""
    rng = random.Random(3700 + n)
    queues = [f"c{n}q{k}" for k in range(rng.randint(1, 2))]
    settings = {}
    for name in queues:
        if rng.random() < 0.35:
            settings[name] = {"concurrency": rng.choice((None, 1, 2, 4)),
                              "rate_limit": rng.choice((None, *RATES))}
    app = make_app(clock=FrozenClock(T0), queues=settings)
    types = {}
    for j in range(rng.randint(1, 4)):
        cls = make_handler(f"rnd.c{n}t{j}.execute", rng.choice(queues), rng)
        app.handlers.register(cls.TYPE, cls)
        types[cls.TYPE] = cls
    jobs = []
    for job_type in types:
        for _ in range(rng.randint(0, 12)):
            key = rng.choice(KEYS)
            later = rng.random() < 0.1
            jobs.append({"type": job_type, "payload": {} if key is None else {"k": key},
                         "priority": rng.randint(0, 3),
                         "scheduled_at": T0 + timedelta(minutes=5) if later else None})
    rng.shuffle(jobs)
    ids = queue.dispatch_many(jobs, app=app) if jobs else []
    with app.engine.begin() as conn:
        running = rng.sample(ids, k=min(len(ids), rng.randint(0, 4)))
        if running:
            conn.execute(cronjob_queue.update().where(cronjob_queue.c.id.in_(running)).values(
                status="running", attempts=1, started_at=T0 - timedelta(seconds=3),
                locked_until=T0 + timedelta(minutes=5)))
        for job_type, cls in types.items():
            if getattr(cls, "RATE_LIMIT", None):
                for _ in range(rng.randint(0, 2)):
                    start(conn, f"type:{job_type}", rng.choice(KEYS)
                          if getattr(cls, "LIMIT_KEY", None) else None, rng)
        for name, limits in settings.items():
            if limits["rate_limit"]:
                for _ in range(rng.randint(0, 2)):
                    start(conn, f"queue:{name}", None, rng)
        hold(conn, rng, queues, list(types))
    return app, queues, list(types)


def start(conn, limiter: str, key: str | None, rng: random.Random) -> None:
    conn.execute(cronjob_flow_start.insert().values(
        limiter=limiter, limit_key=key or "", started_at=T0 - timedelta(
            seconds=rng.choice((0.2, 0.9, 5, 50, 1800)))))


def hold(conn, rng: random.Random, queues: list[str], types: list[str]) -> None:
    """Pauses and blocks, live or ended but not yet pruned (written as stored rows)."""
    ends = (None, T0 + timedelta(minutes=1), T0 - timedelta(seconds=1))
    for scope, names in (("queue", queues), ("type", types), ("task", types)):
        for name in names:
            if rng.random() < 0.2:
                target = name.rsplit(".", 1)[0] if scope == "task" else name
                conn.execute(cronjob_pause.insert().values(
                    scope=scope, name=target, reason=None, created_by="test",
                    created_at=T0 - timedelta(minutes=1), until_at=rng.choice(ends)))
    for job_type in types:
        if rng.random() < 0.3:
            key = rng.choice(("", "a", "b"))
            conn.execute(cronjob_block.insert().values(
                type=job_type, limit_key=key, reason="FloodWait", created_at=T0,
                until_at=rng.choice(ends[1:])))


def held_by_views(app, queues: list[str], reasons: Counter) -> Counter:
    """The rows `held_now` counts per queue and type (any reason), reasons counted."""
    with app.engine.connect() as conn:
        held = flowstate.held_now(app, conn, T0, store.list_pauses(conn, T0),
                                  store.list_blocks(conn, T0))
    out: Counter = Counter()
    for h in held:  # one entry per queue, type and reason
        if h["queue"] in queues:
            out[(h["queue"], h["type"])] += h["rows"]
            reasons[h["reason"]] += h["rows"]
    return +out


def due_rows(app, queues: list[str]) -> Counter:
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(cronjob_queue.c.queue, cronjob_queue.c.type).where(
            cronjob_queue.c.queue.in_(queues), store.sql.due(T0))).all()
    return Counter((r.queue, r.type) for r in rows)


def claim(app, name: str, slots: int, *, keep: bool) -> list[dict]:
    """A claim of queue `name` with `slots` free; `keep` False rolls it back."""
    with app.engine.connect() as conn:
        transaction = conn.begin()
        rows = Executor(app, "w:1").claim_rows(conn, T0, queue=name, limit=slots).rows
        (transaction.commit if keep else transaction.rollback)()
    return rows


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_the_views_call_held_exactly_what_a_claim_refuses(make_app):
    reasons: Counter = Counter()
    for n in range(CONFIGS):
        app, queues, types = configure(make_app, n)
        held = held_by_views(app, queues, reasons)
        due = due_rows(app, queues)
        slots = {name: 1 + random.Random(n).randint(0, sum(due.values()) + 1)
                 for name in queues}
        fewer = {name: claim(app, name, slots[name], keep=False) for name in queues}
        taken = {name: claim(app, name, 1000, keep=True) for name in queues}
        refused = due - Counter((r["queue"], r["type"])
                                for rows in taken.values() for r in rows)
        assert held == +refused, (n, dict(held), dict(refused))
        for name in queues:
            full = [r["id"] for r in taken[name]]
            want = full[:min(slots[name], len(full))]
            assert [r["id"] for r in fewer[name]] == want, (n, name, slots[name])
    # The draws reach every reason a row is held for, many times.
    assert all(reasons[r] >= 10 for r in ("paused", "blocked", "limited", "rate_limited")), \
        reasons
