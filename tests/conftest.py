"""Fixtures: a fresh database per test on SQLite, MariaDB or PostgreSQL, an App wired to it,
Redis namespaces, and subprocess environments. Real servers only: a server that does not
answer fails the test (run `make test`, which starts them)."""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from cronjobs import app as app_module
from cronjobs.app import App
from cronjobs.config import Settings
from cronjobs.migrate import upgrade

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_HANDLERS = str(Path(__file__).parent / "sample_handlers")
MARIADB = "mysql+pymysql://root@127.0.0.1:3306"
POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432"
REDIS = "redis://127.0.0.1:6379/0"
BACKENDS = ["sqlite", "mariadb", "postgresql"]

effects = sa.Table(
    "test_effects", sa.MetaData(),
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
              autoincrement=True),
    sa.Column("job_id", sa.BigInteger),
    sa.Column("kind", sa.String(32)),
    sa.Column("info", sa.String(191)),
    sa.Column("pid", sa.Integer),
    sa.Column("started", sa.Double),
    sa.Column("ended", sa.Double),
)


def new_database(backend: str, tmp_path: Path) -> tuple[str, callable]:
    """Create an empty database for one test; returns (url, drop)."""
    name = "cjt_" + uuid.uuid4().hex[:12]
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / (name + '.db')}", lambda: None
    if backend == "mariadb":
        admin = sa.create_engine(MARIADB + "/test", poolclass=sa.pool.NullPool)
        with admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")

        def drop() -> None:
            with admin.begin() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
            admin.dispose()

        return f"{MARIADB}/{name}?charset=utf8mb4", drop
    if backend == "postgresql":
        admin = sa.create_engine(POSTGRES + "/test", poolclass=sa.pool.NullPool)
        with admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {name}")

        def drop() -> None:
            with admin.begin() as conn:
                conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            admin.dispose()

        return f"{POSTGRES}/test?options=-csearch_path%3D{name}", drop
    raise ValueError(backend)


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """The database backend under test (tests narrow it with indirect parametrize)."""
    return request.param


def _migrate(url: str) -> None:
    """Migrate the database at `url` (Alembic, every revision) and add `test_effects`."""
    from cronjobs.store.engines import make_engine

    migrated = make_engine(url)
    upgrade(migrated)
    migrated.dispose()
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    effects.metadata.create_all(engine)
    engine.dispose()


class _Template:
    """A database migrated once per test process and backend, copied for each test: the
    same tables, indexes, keys and rows as `_migrate` makes (a copy of what the
    migrations made, not a second description of the schema), without running the
    migrations again per test (their DDL is most of a MariaDB test's set-up).
    `tests/test_migrations.py` runs the migrations themselves."""

    def __init__(self, backend: str, folder: Path):
        self.backend = backend
        self.url, self.drop = new_database(backend, folder)
        _migrate(self.url)
        self.name = self.url.split("/")[-1].split("?")[0] if backend == "mariadb" else None
        if backend == "postgresql":
            self.name = self.url.split("%3D")[-1]
            self.ddl = self._postgres_ddl()
        if backend == "mariadb":
            self.ddl, self.rows = self._mariadb_ddl()

    def copy(self, tmp_path: Path) -> tuple[str, callable]:
        """A new database of this backend with the template's schema and rows."""
        url, drop = new_database(self.backend, tmp_path)
        if self.backend == "sqlite":
            import shutil

            shutil.copyfile(self.url.removeprefix("sqlite:///"), url.removeprefix("sqlite:///"))
            return url, drop
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            if self.backend == "mariadb":
                conn.exec_driver_sql("SET FOREIGN_KEY_CHECKS = 0")
                for statement in self.ddl:
                    conn.exec_driver_sql(statement)
                for table in self.rows:
                    conn.exec_driver_sql(f"INSERT INTO {table} SELECT * FROM {self.name}.{table}")
                conn.exec_driver_sql("SET FOREIGN_KEY_CHECKS = 1")
            else:
                schema = url.split("%3D")[-1]
                conn.exec_driver_sql(self.ddl.replace(f"{self.name}.", f"{schema}."))
                conn.exec_driver_sql(f"INSERT INTO {schema}.alembic_version "
                                     f"SELECT * FROM {self.name}.alembic_version")
        engine.dispose()
        return url, drop

    def _mariadb_ddl(self) -> tuple[list[str], list[str]]:
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            tables = [r[0] for r in conn.exec_driver_sql("SHOW TABLES")]
            ddl = [conn.exec_driver_sql(f"SHOW CREATE TABLE `{t}`").one()[1] for t in tables]
            rows = [t for t in tables
                    if conn.exec_driver_sql(f"SELECT COUNT(*) FROM `{t}`").scalar()]
        engine.dispose()
        return ddl, rows

    def _postgres_ddl(self) -> str:
        dump = subprocess.run(
            ["pg_dump", "--schema-only", "--no-owner", "--no-privileges", "-n", self.name,
             "-h", "127.0.0.1", "-p", "5432", "-U", "postgres", "test"],
            capture_output=True, text=True, check=True, timeout=60).stdout
        keep = [line for line in dump.splitlines()
                if not line.startswith(("--", "SET ", "SELECT pg_catalog.set_config", "\\"))
                and not line.startswith(f"CREATE SCHEMA {self.name}")]
        return "\n".join(keep)


_TEMPLATES: dict[str, _Template] = {}


@pytest.fixture(scope="session")
def _templates(tmp_path_factory):
    """Per backend, the template database of this test process (made on first use)."""
    yield _TEMPLATES
    for template in _TEMPLATES.values():
        template.drop()


@pytest.fixture
def db_url(backend: str, tmp_path: Path, _templates, tmp_path_factory):
    """URL of a fresh, migrated database with the `test_effects` table."""
    if backend not in _templates:
        _templates[backend] = _Template(backend, tmp_path_factory.mktemp("template"))
    url, drop = _templates[backend].copy(tmp_path)
    yield url
    drop()


@pytest.fixture
def namespace() -> str:
    """A Redis key prefix of this test; its keys are deleted afterwards."""
    ns = "cjt-" + uuid.uuid4().hex[:10]
    yield ns
    import redis

    client = redis.Redis.from_url(REDIS)
    keys = list(client.scan_iter(f"{ns}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def make_app(db_url: str, namespace: str):
    """Factory: `make_app(clock=None, broker_url="memory://", pool_size=None, **settings)
    -> App`, installed as the current App, with a handler registry of its own (the sample
    handlers registered; `app.handlers.register(...)` adds a class for this test only)."""
    made: list[App] = []

    def factory(clock=None, broker_url: str = "memory://", pool_size: int | None = None,
                **overrides) -> App:
        overrides.setdefault("handler_paths", (SAMPLE_HANDLERS,))
        settings = Settings(database_url=db_url, broker_url=broker_url,
                            broker_namespace=namespace, **overrides)
        app = App(settings, clock=clock, pool_size=pool_size)
        app.handlers.load()
        app_module.use(app)
        made.append(app)
        return app

    yield factory
    app_module.use(None)
    for app in made:
        app.close()


def effect_rows(app: App, kind: str | None = None) -> list[dict]:
    """Rows of `test_effects` (what sample handlers recorded)."""
    stmt = sa.select(effects).order_by(effects.c.id)
    if kind:
        stmt = stmt.where(effects.c.kind == kind)
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(stmt).mappings()]



@pytest.fixture(autouse=True)
def _collect_garbage():
    """Collect garbage after every test, so that an unclosed socket or file left in a
    reference cycle is reported (ResourceWarning, an error here) by the test that leaked
    it, not at the end of the session."""
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def _root_log_level():
    """Give the root logger its level back after every test: a test that sets logging up
    as a command does (`cronjobs.logs`: root at INFO) would otherwise make later tests
    capture INFO lines they never asked for (caplog's handler sits on the root)."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)

def cli_env(db_url: str, namespace: str = "cronjobs", broker_url: str = "memory://",
            **extra: str) -> dict:
    """Environment for a `cronjobs` subprocess: no stray CRONJOBS_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONJOBS_")}
    env.update({"CRONJOBS_DATABASE_URL": db_url, "CRONJOBS_BROKER_URL": broker_url,
                "CRONJOBS_BROKER_NAMESPACE": namespace, "CRONJOBS_HANDLER_PATHS": SAMPLE_HANDLERS,
                "CRONJOBS_LOG_LEVEL": "WARNING", **extra})
    return env


def run_cli(args: list[str], env: dict, timeout: float = 60, cwd: Path | None = None
            ) -> subprocess.CompletedProcess:
    """Run `cronjobs ARGS` as a subprocess and capture its output."""
    return subprocess.run([sys.executable, "-m", "cronjobs", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)



def pytest_collection_finish(session) -> None:
    """Move what collection made (every imported module, the test items) to the garbage
    collector's permanent generation (`gc.freeze`): the collection after every test
    (`_collect_garbage`) then walks only what the tests made since, not the whole session's
    heap each time. A leak of a test is still found by that test's collection."""
    gc.collect()
    gc.freeze()
