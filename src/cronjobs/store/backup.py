"""Back up the system's own database to a folder and keep the newest N (the `db-backup` task).

- SQLite: the online backup API (`sqlite3.Connection.backup`): a consistent copy while
  other connections keep writing; the file is a SQLite database (`.sqlite3`).
- MySQL/MariaDB: `mariadb-dump` or `mysqldump --single-transaction` (a consistent
  snapshot of InnoDB tables without locking them), gzip-compressed (`.sql.gz`).
- PostgreSQL: `pg_dump` (plain SQL, `--no-owner`), gzip-compressed (`.sql.gz`); only the
  schema named by a `search_path` option of the URL when there is one.

A backup is written to `<name>.partial` and renamed when complete, so a file with the
final name is always whole. Passwords go to the dump program through a private option
file (`--defaults-extra-file`, mode 0600) or the `PGPASSWORD` variable, never its command
line. Backups are created with mode 0600: they hold every row.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote

from sqlalchemy.engine import URL, make_url

from ..errors import CronjobsError

CHUNK_BYTES = 1 << 20
_NAME = re.compile(r"^(?P<prefix>.+)-(?P<stamp>\d{8}T\d{6}Z)(?:-(?P<n>\d+))?\.(sqlite3|sql\.gz)$")


class BackupError(CronjobsError):
    """A backup could not be made (no dump program, the program failed, nothing to copy)."""


@dataclass(frozen=True)
class BackupResult:
    """One backup made.

    Attributes:
        file: path of the backup file.
        size_bytes: its size (bytes).
        duration_ms: how long the backup took (milliseconds).
        sha256: hex SHA-256 of the file's bytes.
        method: `sqlite-backup-api`, `mysqldump` / `mariadb-dump` or `pg_dump`.
        database: the database (or schema) backed up, without credentials.
        deleted: names of older backups deleted to keep the newest N.
    """

    file: str
    size_bytes: int
    duration_ms: float
    sha256: str
    method: str
    database: str
    deleted: list[str] = field(default_factory=list)


def dump_program(url: str) -> str | None:
    """The dump program the database of `url` needs (`mariadb-dump`/`mysqldump`,
    `pg_dump`), its path when installed; None for SQLite (built in) or when missing."""
    backend = make_url(url).get_backend_name()
    names = {"mysql": ("mariadb-dump", "mysqldump"), "mariadb": ("mariadb-dump", "mysqldump"),
             "postgresql": ("pg_dump",)}.get(backend, ())
    return next((path for name in names if (path := shutil.which(name))), None)


def can_back_up(url: str) -> bool:
    """True when this machine can back up the database of `url` (SQLite, or its dump
    program is installed)."""
    backend = make_url(url).get_backend_name()
    return backend == "sqlite" or dump_program(url) is not None


def backup_database(url: str, folder: str | Path, keep: int, now: datetime) -> BackupResult:
    """Back up the database of `url` into `folder`, then keep only the newest `keep`.

    Args:
        url: SQLAlchemy URL of the database (SQLite file, MySQL/MariaDB, PostgreSQL).
        folder: where backups go (created, mode 0700, when missing).
        keep: how many backups of this database to keep (>= 1), the new one included.
        now: naive UTC time for the file name (`<db>-YYYYMMDDTHHMMSSZ.<ext>`).

    Returns:
        The new backup's file, size, duration, SHA-256 and the names deleted.

    Raises:
        BackupError: unsupported or in-memory database, dump program missing or failed.
    """
    if keep < 1:
        raise BackupError(f"keep must be at least 1, got {keep!r}")
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    name, method, writer = _plan(parsed, backend)
    prefix = "cronjobs-" + re.sub(r"[^A-Za-z0-9_.]+", "_", name)
    ext = "sqlite3" if backend == "sqlite" else "sql.gz"
    target = _free_name(folder, prefix, now, ext)
    partial = target.with_name(target.name + ".partial")
    started = time.monotonic()
    try:
        writer(partial)
        os.chmod(partial, 0o600)
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)
    duration_ms = round((time.monotonic() - started) * 1000, 1)
    deleted = prune(folder, prefix, keep)
    return BackupResult(file=str(target), size_bytes=target.stat().st_size,
                        duration_ms=duration_ms, sha256=sha256_of(target), method=method,
                        database=name, deleted=deleted)


def prune(folder: str | Path, prefix: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` backups named `<prefix>-<stamp>.<ext>` in `folder`;
    other files are never touched. Returns the names deleted, oldest first."""
    found = []
    for path in Path(folder).iterdir():
        match = _NAME.match(path.name)
        if match and match["prefix"] == prefix and path.is_file():
            found.append(((match["stamp"], int(match["n"] or 0)), path))
    found.sort()
    doomed = [path for _, path in found[:max(0, len(found) - keep)]]
    for path in doomed:
        path.unlink()
    return [p.name for p in doomed]


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of the file at `path`."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _free_name(folder: Path, prefix: str, now: datetime, ext: str) -> Path:
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    target, n = folder / f"{prefix}-{stamp}.{ext}", 0
    while target.exists():
        n += 1
        target = folder / f"{prefix}-{stamp}-{n}.{ext}"
    return target


def _plan(url: URL, backend: str):
    """(database name, method, writer(path)) for the backend of `url`."""
    if backend == "sqlite":
        source = url.database
        if not source or source == ":memory:" or not Path(source).is_file():
            raise BackupError(f"no SQLite database file to back up: {source!r}")
        return Path(source).stem, "sqlite-backup-api", lambda path: _sqlite(source, path)
    program = dump_program(url.render_as_string(hide_password=False))
    if backend in ("mysql", "mariadb"):
        if program is None:
            raise BackupError("module not installed: neither mariadb-dump nor mysqldump is on "
                              "PATH (Debian: apt-get install mariadb-client)")
        return url.database, Path(program).name, lambda path: _mysql(program, url, path)
    if backend == "postgresql":
        if program is None:
            raise BackupError("module not installed: pg_dump is not on PATH (Debian: "
                              "apt-get install postgresql-client)")
        schema = _search_path(url)
        name = f"{url.database}.{schema}" if schema else url.database
        return name, "pg_dump", lambda path: _postgres(program, url, schema, path)
    raise BackupError(f"cannot back up a {backend!r} database")


def _sqlite(source: str, path: Path) -> None:
    src = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
    dst = sqlite3.connect(str(path))
    try:
        with dst:
            src.backup(dst)
    finally:
        dst.close()
        src.close()


def _mysql(program: str, url: URL, path: Path) -> None:
    lines = ["[client]"]
    for key, value in (("user", url.username), ("password", url.password),
                       ("host", url.host), ("port", url.port),
                       ("socket", url.query.get("unix_socket"))):
        if value is not None:
            lines.append(f"{key}={value}")
    with tempfile.NamedTemporaryFile("w", prefix="cronjobs-", suffix=".cnf") as cnf:
        os.chmod(cnf.name, 0o600)
        cnf.write("\n".join(lines) + "\n")
        cnf.flush()
        _dump([program, f"--defaults-extra-file={cnf.name}", "--single-transaction",
               "--routines", "--triggers", "--hex-blob", "--no-tablespaces",
               "--default-character-set=utf8mb4", url.database], None, path)


def _postgres(program: str, url: URL, schema: str | None, path: Path) -> None:
    args = [program, "--no-owner", "--format=plain", "--dbname", url.database]
    for flag, value in (("--host", url.host), ("--port", url.port),
                        ("--username", url.username), ("--schema", schema)):
        if value is not None:
            args += [flag, str(value)]
    env = dict(os.environ)
    if url.password is not None:
        env["PGPASSWORD"] = url.password
    _dump(args, env, path)


def _dump(args: list[str], env: dict | None, path: Path) -> None:
    """Run a dump program and gzip its standard output into `path`."""
    with tempfile.TemporaryFile() as errors, gzip.open(path, "wb") as out, \
            subprocess.Popen(args, stdout=subprocess.PIPE, stderr=errors, env=env) as proc:
        while chunk := proc.stdout.read(CHUNK_BYTES):
            out.write(chunk)
        code = proc.wait()
        errors.seek(0)
        message = errors.read().decode(errors="replace").strip()
    if code != 0:
        first = message.splitlines()[0] if message else "no message"
        raise BackupError(f"{Path(args[0]).name} exited with status {code}: {first}")


def _search_path(url: URL) -> str | None:
    """The schema of `options=-csearch_path=X` in a PostgreSQL URL, if any."""
    options = unquote(str(url.query.get("options", "")))
    match = re.search(r"search_path\s*=\s*([A-Za-z_][A-Za-z0-9_$]*)", options)
    return match.group(1) if match else None
