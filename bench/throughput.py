"""Throughput: cronjobs (MariaDB + Redis, one worker process) against bare Dramatiq on the
same Redis, both draining N no-op jobs queued beforehand. Prints jobs/s and the ratio, for
cronjobs at the default prefetch (= threads) and at Dramatiq's default (2 x threads).

Usage: .venv/bin/python bench/throughput.py [N] [THREADS]
Needs MariaDB on 127.0.0.1:3306 (root) and Redis on 127.0.0.1:6379 (`make services`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis
import sqlalchemy as sa

HERE = Path(__file__).parent
REDIS = "redis://127.0.0.1:6379/0"
MARIADB = "mysql+pymysql://root@127.0.0.1:3306"


def drain_seconds(cmd: list[str], env: dict, done, poll: float = 0.02) -> float:
    proc = subprocess.Popen(cmd, env=env)
    try:
        started = None
        while not done():
            if started is None and not done(True):
                started = time.monotonic()
            time.sleep(poll)
        return time.monotonic() - (started or time.monotonic())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def bare(n: int, threads: int) -> float:
    ns = "cjbench-" + uuid.uuid4().hex[:8]
    sys.path.insert(0, str(HERE))
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=REDIS, namespace=ns, middleware=[])
    actor = dramatiq.actor(lambda job_id: None, broker=broker, queue_name="default", actor_name="noop")
    for i in range(n):
        actor.send(i)
    client = redis.Redis.from_url(REDIS)

    def done(started_check: bool = False) -> bool:
        left = client.hlen(f"{ns}:default.msgs")
        return left < n if started_check else left == 0

    try:
        return drain_seconds([sys.executable, str(HERE / "bare_dramatiq.py"), REDIS, ns, str(threads)],
                             dict(os.environ), done)
    finally:
        for key in client.scan_iter(f"{ns}*"):
            client.delete(key)


def cronjobs_run(n: int, threads: int, prefetch: int) -> float:
    from cronjobs import queue
    from cronjobs.app import App, use
    from cronjobs.config import Settings
    from cronjobs.migrate import upgrade
    import registry

    db = "cjbench_" + uuid.uuid4().hex[:8]
    ns = "cjbench-" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(MARIADB + "/test")
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {db}")
    url = f"{MARIADB}/{db}?charset=utf8mb4"
    try:
        settings = Settings(database_url=url, broker_url=REDIS, broker_namespace=ns,
                            handler_paths=(str(HERE / "handlers"),))
        registry.load(settings)
        app = App(settings, handlers=registry)
        use(app)
        upgrade(app.engine)
        for start in range(0, n, 1000):
            queue.dispatch_many([{"type": "bench.noop.execute"}] * min(1000, n - start))
        q = sa.table("cronjob_queue", sa.column("status"))

        def done(started_check: bool = False) -> bool:
            with app.engine.connect() as conn:
                pending = conn.execute(sa.select(sa.func.count()).select_from(q)
                                       .where(q.c.status != "completed")).scalar_one()
            return pending < n if started_check else pending == 0

        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONJOBS_")}
        env.update(CRONJOBS_DATABASE_URL=url, CRONJOBS_BROKER_URL=REDIS,
                   CRONJOBS_BROKER_NAMESPACE=ns, CRONJOBS_HANDLER_PATHS=str(HERE / "handlers"),
                   CRONJOBS_LOG_LEVEL="WARNING")
        seconds = drain_seconds([sys.executable, "-m", "cronjobs", "worker", "--queues", "default",
                                 "--threads", str(threads), "--prefetch", str(prefetch)],
                                env, done)
        app.close()
        return seconds
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {db}")
        client = redis.Redis.from_url(REDIS)
        for key in client.scan_iter(f"{ns}*"):
            client.delete(key)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    base = bare(n, threads)
    print(f"jobs={n} threads={threads}")
    print(f"bare dramatiq (redis, no-op, prefetch {2 * threads}):     {n / base:8.0f} jobs/s")
    for prefetch in (threads, 2 * threads):
        ours = cronjobs_run(n, threads, prefetch)
        print(f"cronjobs (mariadb + redis, no-op, prefetch {prefetch}): {n / ours:8.0f} jobs/s"
              f"  ratio to bare dramatiq {base / ours:.3f}")


if __name__ == "__main__":
    main()
