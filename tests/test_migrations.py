"""Migrations: `upgrade head` matches the models; upgrade -> downgrade -> upgrade works."""

from __future__ import annotations

from datetime import datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from conftest import new_database
from cronjobs.migrate import current, downgrade, migrations_path, upgrade
from cronjobs.store.engines import make_engine
from cronjobs.store.models import metadata


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
        assert current(engine) == "0018"
        assert _diff(engine) == []
        downgrade(engine)
        assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
        upgrade(engine)
        assert {"cronjob_queue", "cronjob_runtime", "cronjob_slot", "cronjob_worker",
                "cronjob_alert", "cronjob_operation", "cronjob_operation_batch",
                "cronjob_secret", "cronjob_stop"} <= set(
            sa.inspect(engine).get_table_names())
        assert _diff(engine) == []
    finally:
        engine.dispose()
        drop()


def test_migrations_ship_with_the_package():
    path = migrations_path()
    assert (path / "env.py").is_file()
    assert (path / "versions" / "0001_initial.py").is_file()


def test_open_alerts_carry_over_to_the_streak_columns(backend, tmp_path):
    url, drop = new_database(backend, tmp_path)
    engine = make_engine(url)
    try:
        upgrade(engine, "0003")
        seen, sent = datetime(2026, 3, 1, 14, 3), datetime(2026, 3, 1, 14, 8)
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO cronjob_alert (problem, status, message, first_seen_at, last_seen_at,"
                " last_sent_at) VALUES ('disk', 'fail', 'disk 95 % used', :seen, :sent, :sent)"),
                {"seen": seen, "sent": sent})
        upgrade(engine)
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT state, runs, state_since, alerted_at, changes "
                                       "FROM cronjob_alert")).mappings().one()
        # an open problem stays failing since it was first seen, alerted when a message went
        assert (row["state"], row["runs"], row["changes"]) == ("fail", 1, None)
        assert [_naive(row["state_since"]), _naive(row["alerted_at"])] == [seen, sent]
    finally:
        engine.dispose()
        drop()


def _naive(value) -> datetime:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def test_max_attempts_becomes_optional_and_every_row_is_kept(backend, tmp_path):
    """0007: rows keep their values (children of a parent too: SQLite's table is not
    rebuilt, which would cascade-delete them), an unset max_attempts is accepted, ids are
    not reused after a delete, and downgrading gives unset rows 3 again."""
    url, drop = new_database(backend, tmp_path)
    engine = make_engine(url)
    insert = sa.text("INSERT INTO cronjob_queue (type, queue, status, priority, attempts, "
                     "max_attempts, parent_id, created_at, updated_at) VALUES ('a.b.execute', "
                     "'default', 'pending', 5, 0, :most, :parent, :now, :now)")
    now = datetime(2026, 3, 1, 14, 3)
    try:
        upgrade(engine, "0006")
        with engine.begin() as conn:
            for parent in (None, 1, 1):
                conn.execute(insert, {"most": 2, "parent": parent, "now": now})
            conn.execute(sa.text("DELETE FROM cronjob_queue WHERE id = 3"))
        upgrade(engine)
        with engine.begin() as conn:
            conn.execute(insert, {"most": None, "parent": None, "now": now})
        assert _rows(engine) == [(1, None, 2), (2, 1, 2), (4, None, None)]
        downgrade(engine, "0006")
        assert _rows(engine) == [(1, None, 2), (2, 1, 2), (4, None, 3)]
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(insert, {"most": None, "parent": None, "now": now})
    finally:
        engine.dispose()
        drop()


def _rows(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(
            "SELECT id, parent_id, max_attempts FROM cronjob_queue ORDER BY id"))]
