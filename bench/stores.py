"""Benchmark databases and Redis namespaces: created for one run and dropped afterwards.

MariaDB gets a database `bench_<random>`, PostgreSQL a schema of that name in `test`,
SQLite a file in a temporary folder; Redis keys live under a prefix `cjbench-<random>`.
Nothing shared is restarted or changed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
import tenacity

ROOT = Path(__file__).resolve().parents[1]
HANDLERS = str(Path(__file__).parent / "handlers")
MARIADB = "mysql+pymysql://root@127.0.0.1:3306"
POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432"
REDIS = "redis://127.0.0.1:6379/0"
BACKENDS = ("mariadb", "postgresql", "sqlite")
NOOP = "bench.noop.execute"
SLEEP = "bench.sleep.execute"


def new_name(prefix: str = "bench_") -> str:
    """A random name for a database, schema or key prefix."""
    return prefix + uuid.uuid4().hex[:10]


@contextmanager
def database(backend: str, migrate: bool = True) -> Iterator[str]:
    """Yield the URL of a fresh database on `backend` (migrated to head); drop it after.

    Args:
        backend: `mariadb`, `postgresql` or `sqlite`.
        migrate: create the cronjobs tables (Alembic upgrade head).
    """
    name = new_name()
    admin = None
    folder = None
    if backend == "mariadb":
        admin = sa.create_engine(MARIADB + "/test", poolclass=sa.pool.NullPool)
        with admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        url = f"{MARIADB}/{name}?charset=utf8mb4"
        drop = f"DROP DATABASE IF EXISTS {name}"
    elif backend == "postgresql":
        admin = sa.create_engine(POSTGRES + "/test", poolclass=sa.pool.NullPool)
        with admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {name}")
        url = f"{POSTGRES}/test?options=-csearch_path%3D{name}"
        drop = f"DROP SCHEMA IF EXISTS {name} CASCADE"
    elif backend == "sqlite":
        folder = tempfile.mkdtemp(prefix="cjbench-")
        url = f"sqlite:///{folder}/{name}.db"
        drop = None
    else:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    try:
        if migrate:
            migrate_to_head(url)
        yield url
    finally:
        if admin is not None:
            with admin.begin() as conn:
                conn.exec_driver_sql(drop)
            admin.dispose()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def pg_database(template: str | None = None) -> Iterator[tuple[str, str]]:
    """Yield `(name, SQLAlchemy URL)` of a fresh PostgreSQL database `bench_<random>`;
    dropped afterwards (`WITH (FORCE)`: connections left over are ended).

    A database of its own, not a schema in `test`: its row of `pg_stat_database` counts
    the transactions of this run only, and its backends are told apart by `datname`.
    Empty: each system installs its own tables (`migrate_to_head` for cronjobs); or, with
    `template` (the name of a database nobody is connected to), a copy of that database:
    its tables, rows and planner statistics (`CREATE DATABASE ... TEMPLATE`).
    """
    name = new_name()
    admin = sa.create_engine(POSTGRES + "/test", poolclass=sa.pool.NullPool,
                             isolation_level="AUTOCOMMIT")
    _create_database(admin, name, template)
    url = f"{POSTGRES}/{name}"
    try:
        yield name, url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


@tenacity.retry(stop=tenacity.stop_after_attempt(5), wait=tenacity.wait_fixed(0.5),
                retry=tenacity.retry_if_exception_type(sa.exc.OperationalError), reraise=True)
def _create_database(admin: sa.Engine, name: str, template: str | None = None) -> None:
    """CREATE DATABASE, tried again while another session holds the template open."""
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}"
                             + (f" TEMPLATE {template}" if template else ""))


def migrate_to_head(url: str) -> None:
    """Create the cronjobs tables in the database of `url` (Alembic upgrade head)."""
    from cronjobs.migrate import upgrade
    from cronjobs.store.engines import make_engine

    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()


@contextmanager
def redis_namespace() -> Iterator[str]:
    """Yield a Redis key prefix of this run; every key under it is deleted afterwards."""
    import redis

    ns = new_name("cjbench-")
    try:
        yield ns
    finally:
        client = redis.Redis.from_url(REDIS)
        keys = list(client.scan_iter(f"{ns}*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start:start + 1000])
        client.close()


def settings(url: str, ns: str, broker_url: str = REDIS, **overrides):
    """`Settings` of a benchmark system: the bench handlers, quiet logs."""
    from cronjobs.config import Settings

    return Settings(database_url=url, broker_url=broker_url, broker_namespace=ns,
                    handler_paths=(HANDLERS,), log_level="WARNING", **overrides)


def make_app(url: str, ns: str, broker_url: str = REDIS, **overrides):
    """An App on `url` with the bench handlers, installed as this process's App."""
    from cronjobs.app import App, use

    s = settings(url, ns, broker_url, **overrides)
    app = App(s)
    app.handlers.load()
    use(app)
    return app


def worker_env(url: str, ns: str, **extra: str) -> dict:
    """Environment of a `cronjobs` subprocess on this run's database and namespace."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONJOBS_")}
    env.update(CRONJOBS_DATABASE_URL=url, CRONJOBS_BROKER_URL=REDIS,
               CRONJOBS_BROKER_NAMESPACE=ns, CRONJOBS_HANDLER_PATHS=HANDLERS,
               CRONJOBS_LOG_LEVEL="WARNING", **extra)
    return env


def count_rows(engine: sa.Engine, status: str | None = None, since_id: int = 0) -> int:
    """Rows of `cronjob_queue` (with `status`, when given, and id > `since_id`)."""
    q = sa.table("cronjob_queue", sa.column("id"), sa.column("status"))
    stmt = sa.select(sa.func.count()).select_from(q).where(q.c.id > since_id)
    if status is not None:
        stmt = stmt.where(q.c.status == status)
    with engine.connect() as conn:
        return conn.execute(stmt).scalar_one()


def dispatch_rows(app, n: int, job_type: str = NOOP, payload: dict | None = None,
                  batch: int = 1000) -> list[int]:
    """Dispatch `n` rows with `dispatch_many` in batches; returns their ids."""
    from cronjobs import queue

    ids: list[int] = []
    for start in range(0, n, batch):
        size = min(batch, n - start)
        ids += queue.dispatch_many([{"type": job_type, "payload": payload or {}}] * size,
                                   app=app)
    return ids


def rmtree_quiet(path: str) -> None:
    """Remove a folder, ignoring errors."""
    shutil.rmtree(path, ignore_errors=True)
