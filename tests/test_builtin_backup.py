"""The `db-backup` task backs up the system's own database (SQLite online backup
API, `mariadb-dump`/`mysqldump`, `pg_dump`), keeps the newest N and records file, size,
duration and SHA-256. Every backup is restored and compared row for row with the source.
It is destructive (it deletes old backups), so it ships disabled; without its dump program
the task is "module not installed"."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import MARIADB, POSTGRES, cli_env, run_cli
from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.config import TaskSettings
from cronjobs.i18n import use_locale
from cronjobs.schedule.scheduler import tick
from cronjobs.schedule.tasks import set_enabled, task_infos
from handlers.DbBackupExecute import DbBackupExecute

T0 = datetime(2026, 3, 1, 2, 0)
ENABLED = {"db-backup": TaskSettings(enabled=True)}


def seed(app) -> None:
    """Rows worth comparing: several statuses, unicode, a parent and child, long payloads."""
    parent = queue.dispatch("test.record.execute", {"name": "şçğüöı 🙂", "n": 1}, app=app,
                            title="başlık", priority=2)
    queue.dispatch("test.record.execute", {"blob": "x" * 5000}, parent_id=parent, app=app,
                   idempotency_key="k-" + uuid.uuid4().hex)
    queue.dispatch("test.shape.execute", {"shape": "dict_ok"}, app=app)
    queue.process(queue.dispatch("test.shape.execute", {"shape": "dict_ok"}, app=app), app=app)


def backup(app, **payload) -> dict:
    """Dispatch and run one db.backup row; returns the row with its result decoded."""
    job_id = queue.dispatch("db.backup.execute", payload, app=app)
    queue.process(job_id, app=app)
    row = queue.get(job_id, app=app)
    assert row["status"] == "completed", row["error"]
    row["result"] = json.loads(row["result_payload"])
    return row


def tables(engine: sa.Engine) -> dict[str, list[tuple]]:
    """Every table's rows, ordered by primary key (or by all columns)."""
    meta = sa.MetaData()
    meta.reflect(engine)
    out = {}
    with engine.connect() as conn:
        for name, table in meta.tables.items():
            order = list(table.primary_key.columns) or list(table.columns)
            out[name] = [tuple(r) for r in conn.execute(sa.select(table).order_by(*order))]
    return out


def assert_same_rows(source: sa.Engine, restored: sa.Engine, backup_id: int) -> None:
    """The restored database holds every row of the source; the backup's own row is
    `running` in it (the backup was taken while it ran), `completed` in the source."""
    want, got = tables(source), tables(restored)
    assert set(want) == set(got) and "cronjob_queue" in got
    queue_rows = {name: {r[0]: r for r in rows} for name, rows in
                  (("want", want.pop("cronjob_queue")), ("got", got.pop("cronjob_queue")))}
    assert queue_rows["want"].keys() == queue_rows["got"].keys()
    for job_id, row in queue_rows["want"].items():
        if job_id != backup_id:
            assert queue_rows["got"][job_id] == row
    assert want == got
    assert len(queue_rows["want"]) >= 5
    with restored.connect() as conn:
        assert conn.exec_driver_sql(f"SELECT status FROM cronjob_queue WHERE id = {backup_id}"
                                    ).scalar_one() == "running"


def check_file(result: dict, folder: Path) -> Path:
    path = Path(result["file"])
    assert path.parent == folder and path.is_file()
    assert result["size_bytes"] == path.stat().st_size > 0
    assert result["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert result["duration_ms"] >= 0
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    return path


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_backup_restores_row_for_row_and_keeps_the_newest(make_app, tmp_path):
    folder = tmp_path / "backups"
    app = make_app(clock=FrozenClock(T0), tasks=ENABLED, backup_dir=str(folder), backup_keep=2)
    seed(app)
    folder.mkdir()
    (folder / "notes.txt").write_text("not a backup")  # never touched
    first = backup(app)
    result = first["result"]
    assert result["method"] == "sqlite-backup-api" and result["deleted"] == []
    path = check_file(result, folder)
    assert path.name == f"cronjobs-{Path(app.engine.url.database).stem}-20260301T020000Z.sqlite3"
    restored = sa.create_engine(f"sqlite:///{path}")
    assert_same_rows(app.engine, restored, first["id"])
    restored.dispose()

    names = [path.name]
    for _ in (1, 2):
        app.clock.advance(3600)
        made = backup(app)["result"]
        names.append(Path(made["file"]).name)
    assert made["deleted"] == [names[0]]  # keep 2: the oldest went
    assert sorted(p.name for p in folder.iterdir()) == sorted(names[1:] + ["notes.txt"])
    # the payload overrides keep; a second backup in the same second gets a suffix and
    # still counts as the newest
    last = backup(app, keep=1)["result"]
    assert Path(last["file"]).name == names[2].replace("Z.sqlite3", "Z-1.sqlite3")
    assert last["deleted"] == names[1:]


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_mariadb_backup_restores_row_for_row(make_app, tmp_path):
    folder = tmp_path / "backups"
    app = make_app(clock=FrozenClock(T0), tasks=ENABLED, backup_dir=str(folder))
    seed(app)
    row = backup(app)
    result = row["result"]
    assert result["method"] in ("mariadb-dump", "mysqldump")
    assert result["database"] == app.engine.url.database
    path = check_file(result, folder)
    assert path.name.endswith("-20260301T020000Z.sql.gz")
    name = "cjt_restore_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(MARIADB + "/test", poolclass=sa.pool.NullPool)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    try:
        subprocess.run(["mariadb", "-h127.0.0.1", "-uroot", name], input=gzip.decompress(
            path.read_bytes()), check=True, capture_output=True)
        restored = sa.create_engine(f"{MARIADB}/{name}?charset=utf8mb4", poolclass=sa.pool.NullPool)
        assert_same_rows(app.engine, restored, row["id"])
        restored.dispose()
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        admin.dispose()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_postgresql_backup_of_the_schema_restores_row_for_row(make_app, tmp_path, db_url):
    folder = tmp_path / "backups"
    app = make_app(clock=FrozenClock(T0), tasks=ENABLED, backup_dir=str(folder))
    seed(app)
    row = backup(app)
    result = row["result"]
    schema = db_url.rsplit("%3D", 1)[1]
    assert (result["method"], result["database"]) == ("pg_dump", f"test.{schema}")
    path = check_file(result, folder)
    app.close()
    admin = sa.create_engine(POSTGRES + "/test", poolclass=sa.pool.NullPool)
    with admin.begin() as conn:  # keep the source under another name, restore the original
        conn.exec_driver_sql(f"ALTER SCHEMA {schema} RENAME TO {schema}_src")
    try:
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-v",
                        "ON_ERROR_STOP=1", "-q"], input=gzip.decompress(path.read_bytes()),
                       check=True, capture_output=True)
        source = sa.create_engine(f"{POSTGRES}/test?options=-csearch_path%3D{schema}_src",
                                  poolclass=sa.pool.NullPool)
        restored = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
        assert_same_rows(source, restored, row["id"])
        source.dispose()
        restored.dispose()
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}_src CASCADE")
        admin.dispose()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_ships_disabled_and_writes_nothing_until_enabled(make_app, tmp_path):
    folder = tmp_path / "backups"
    app = make_app(clock=FrozenClock(T0), backup_dir=str(folder))
    info = next(i for i in task_infos(app) if i.task == "db-backup")
    assert (info.enabled, info.available, info.frequency) == (False, True, "day")
    assert "db-backup" not in {t for t, _, _ in tick(T0, app=app).started}
    job_id = queue.dispatch("db.backup.execute", {}, app=app)
    queue.process(job_id, app=app)
    assert queue.get(job_id, app=app) is None  # cancelled (disabled), childless: deleted
    assert not folder.exists()
    set_enabled("db-backup", True, app=app)
    started = {t: j for t, _, j in tick(T0 + timedelta(days=1), app=app).started}
    queue.process(started["db-backup"], app=app)
    assert queue.get(started["db-backup"], app=app)["status"] == "completed"
    assert len(list(folder.iterdir())) == 1


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_without_a_dump_program_the_task_is_module_not_installed(db_url, tmp_path):
    bare = tmp_path / "bin"  # a PATH with no mariadb-dump / mysqldump on it
    bare.mkdir()
    env = cli_env(db_url)
    env["PATH"] = str(bare)
    listing = run_cli(["list-handlers"], env, cwd=tmp_path)
    line = next(row for row in listing.stdout.splitlines() if row.startswith("db.backup.execute"))
    assert line.rstrip().endswith("module not installed")
    tasks = run_cli(["tasks"], env, cwd=tmp_path).stdout
    assert "module not installed" in next(row for row in tasks.splitlines()
                                          if row.startswith("db-backup"))
    assert run_cli(["tasks", "enable", "db-backup"], env, cwd=tmp_path).returncode == 0
    ticked = run_cli(["tick", "--now", "2026-03-01T02:00:00"], env, cwd=tmp_path).stdout
    assert "skipped db-backup: unavailable (module not installed)" in ticked
    job_id = run_cli(["dispatch", "db.backup.execute"], env, cwd=tmp_path).stdout.strip()
    ran = run_cli(["run", job_id], env, cwd=tmp_path)
    assert ran.returncode == 1 and f"job {job_id} (db.backup.execute): pending" in ran.stdout
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        error = conn.exec_driver_sql(
            f"SELECT error FROM cronjob_queue WHERE id = {job_id}").scalar()
    engine.dispose()
    assert error.startswith("backup failed: module not installed: neither mariadb-dump nor "
                            "mysqldump is on PATH")


def test_results_tab_is_an_escaped_table_in_english_and_turkish():
    result = {"file": "/b/<x>.sql.gz", "size_bytes": 1234, "duration_ms": 5.5, "sha256": "ab",
              "method": "mysqldump", "database": "app", "deleted": ["a.sql.gz", "b.sql.gz"]}
    html = str(DbBackupExecute.render_summary(result))
    assert "/b/&lt;x&gt;.sql.gz" in html and "<x>" not in html
    assert "<th>Size (bytes)</th><td>1234</td>" in html
    assert "<th>Old backups deleted</th><td>a.sql.gz, b.sql.gz</td>" in html
    with use_locale("tr"):
        turkish = str(DbBackupExecute.render_summary(result))
    assert "<th>Boyut (bayt)</th><td>1234</td>" in turkish and "<th>Veritabanı</th>" in turkish
