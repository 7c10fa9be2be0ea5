"""The large texts of a row (payload, result, error, traceback, process log) read in
bounded pieces.

The Job page reads the first characters of each and its whole size, never the whole
value; a download reads it in chunks, so a 30 MB result never sits whole in the
dashboard's memory. MariaDB and PostgreSQL: `SUBSTR` (characters) and `OCTET_LENGTH` in
the query, the server does the cutting. SQLite runs inside the dashboard's process, and
its `SUBSTR` and `LENGTH` load the whole value there; so it reads the stored UTF-8 bytes
through SQLite's incremental blob I/O (`blobopen`), which reads only the pages asked for
and knows the size without reading any.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, func, select

from .models import cronjob_queue as q

if TYPE_CHECKING:  # only SQLite's paths use it, and its dialect has imported it
    import sqlite3

FIELDS = ("payload", "result_payload", "error", "traceback", "process_logs")
# Characters per statement of a download: at most 2 MiB of UTF-8, within the smallest
# max_allowed_packet a MariaDB server may have for cronjobs (4 MiB).
CHUNK_CHARS = 1 << 19


def _check(field: str) -> None:
    if field not in FIELDS:
        raise ValueError(f"field must be one of {', '.join(FIELDS)}, got {field!r}")


def _blob(conn: Connection, job_id: int, field: str) -> sqlite3.Blob | None:
    """SQLite: the stored bytes of `field` of row `job_id`, opened for reading; None for
    NULL or a missing row."""
    import sqlite3

    raw = conn.connection.driver_connection
    try:
        return raw.blobopen(q.name, field, job_id, readonly=True)
    except sqlite3.OperationalError:  # "cannot open value of type null", "no such rowid"
        return None


def job_heads(conn: Connection, job_id: int, head_chars: int) -> dict | None:
    """Row `job_id` with each of `FIELDS` cut to its first `head_chars` characters.

    Returns:
        The row as a dict of every column, where each field of `FIELDS` holds at most
        `head_chars` characters and `<field>_bytes` its whole size (bytes, None for NULL);
        None when there is no such row.
    """
    sqlite = conn.dialect.name == "sqlite"
    columns = [c for c in q.columns if c.name not in FIELDS]
    if not sqlite:
        columns += [func.substr(q.c[f], 1, head_chars).label(f) for f in FIELDS]
        columns += [func.octet_length(q.c[f]).label(f + "_bytes") for f in FIELDS]
    found = conn.execute(select(*columns).where(q.c.id == job_id)).mappings().first()
    if found is None:
        return None
    row = dict(found)
    for field in FIELDS if sqlite else ():
        blob = _blob(conn, job_id, field)
        row[field] = row[field + "_bytes"] = None
        if blob is not None:
            with blob:
                row[field + "_bytes"] = len(blob)
                row[field] = blob.read(4 * head_chars).decode("utf-8", "ignore")[:head_chars]
    return row


def field_size(conn: Connection, job_id: int, field: str) -> tuple[bool, int | None]:
    """`(row exists, size of its field in bytes or None for NULL)`.

    Raises:
        ValueError: `field` is not one of `FIELDS`.
    """
    _check(field)
    if conn.dialect.name == "sqlite":
        exists = conn.execute(select(q.c.id).where(q.c.id == job_id)).first() is not None
        blob = _blob(conn, job_id, field) if exists else None
        if blob is None:
            return exists, None
        with blob:
            return True, len(blob)
    found = conn.execute(select(func.octet_length(q.c[field])).where(q.c.id == job_id)).first()
    return (found is not None, found[0] if found else None)


def field_chunks(engine: Engine, job_id: int, field: str) -> Iterator[bytes]:
    """Yield the whole `field` of row `job_id` as UTF-8, a bounded chunk at a time.

    One connection serves every chunk and is given back when the iterator ends or is
    closed. PostgreSQL and MariaDB read in one REPEATABLE READ snapshot. SQLite reads
    outside any transaction (the engine begins each one IMMEDIATE, which would hold the
    write lock for as long as the download lasts); a row rewritten meanwhile ends the
    download with an error. Yields nothing for a NULL value or a missing row.

    Raises:
        ValueError: `field` is not one of `FIELDS`.
    """
    _check(field)
    if engine.dialect.name == "sqlite":
        yield from _sqlite_chunks(engine, job_id, field)
        return
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn:
        with conn.begin():
            start = 1
            while True:
                chunk = conn.execute(select(func.substr(q.c[field], start, CHUNK_CHARS))
                                     .where(q.c.id == job_id)).scalar()
                if chunk:
                    yield chunk.encode("utf-8")
                if chunk is None or len(chunk) < CHUNK_CHARS:
                    return
                start += CHUNK_CHARS


def _sqlite_chunks(engine: Engine, job_id: int, field: str) -> Iterator[bytes]:
    import sqlite3

    raw = engine.raw_connection()
    try:
        try:
            blob = raw.driver_connection.blobopen(q.name, field, job_id, readonly=True)
        except sqlite3.OperationalError:  # NULL or no such row
            return
        with blob:
            while chunk := blob.read(2 * CHUNK_CHARS):
                yield chunk
    finally:
        raw.close()
