"""Migrations: `upgrade head` matches the models; upgrade -> downgrade -> upgrade works."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from cronjobs.db import make_engine
from cronjobs.migrate import current, downgrade, migrations_path, upgrade
from cronjobs.models import metadata
from conftest import new_database


def _diff(engine) -> list:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True,
                                                     "compare_server_default": False})
        return compare_metadata(ctx, metadata)


def test_head_matches_models_and_round_trips(backend, tmp_path):
    url, drop = new_database(backend, tmp_path)
    engine = make_engine(url)
    try:
        assert current(engine) is None
        upgrade(engine)
        assert current(engine) == "0004"
        assert _diff(engine) == []
        downgrade(engine)
        assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
        upgrade(engine)
        assert {"cronjob_queue", "cronjob_runtime", "cronjob_slot", "cronjob_worker",
         "cronjob_alert", "cronjob_secret"} <= set(
            sa.inspect(engine).get_table_names())
        assert _diff(engine) == []
    finally:
        engine.dispose()
        drop()


def test_migrations_ship_with_the_package():
    path = migrations_path()
    assert (path / "env.py").is_file()
    assert (path / "versions" / "0001_initial.py").is_file()
