"""The test databases are what the migrations make: `db_url` copies a database migrated
once per test process (tests/conftest.py, `_Template`); here a copy and a database
migrated on the spot are compared table by table (columns, keys, indexes, rows)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from conftest import _migrate, new_database


def _describe(url: str) -> dict:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    schema = url.split("%3D")[-1] if "%3D" in url else None
    inspector = sa.inspect(engine)
    described = {}
    with engine.connect() as conn:
        for table in sorted(inspector.get_table_names()):
            columns = [(c["name"], str(c["type"]), c["nullable"],
                        str(c.get("default")).replace(f"{schema}.", "") if schema
                        else str(c.get("default")))
                       for c in inspector.get_columns(table)]
            indexes = sorted((i["name"], tuple(i["column_names"]), bool(i["unique"]))
                             for i in inspector.get_indexes(table))
            keys = sorted((tuple(k["constrained_columns"]), k["referred_table"],
                           tuple(k["referred_columns"]), str(k.get("options")))
                          for k in inspector.get_foreign_keys(table))
            primary = tuple(inspector.get_pk_constraint(table)["constrained_columns"])
            rows = conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar()
            described[table] = (columns, indexes, keys, primary, rows)
    engine.dispose()
    return described


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"], indirect=True)
def test_a_test_database_is_the_migrated_schema(backend, db_url, tmp_path):
    (tmp_path / "fresh").mkdir()
    url, drop = new_database(backend, tmp_path / "fresh")
    try:
        _migrate(url)
        fresh, copied = _describe(url), _describe(db_url)
    finally:
        drop()
    assert len(fresh) >= 10 and "cronjob_queue" in fresh and "alembic_version" in fresh
    assert copied == fresh
