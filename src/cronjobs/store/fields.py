"""The large texts of a row (payload, result, error, process log) read in bounded pieces.

The Job page reads the first characters of each with `SUBSTR` and its whole size with
an octet length, never the whole value; a download reads it in chunks of characters, so
a 30 MB result never sits whole in the dashboard's memory. `SUBSTR` counts characters on
all three backends (MariaDB and PostgreSQL on text columns, SQLite on text values).
"""

from __future__ import annotations

from typing import Iterator

from sqlalchemy import Connection, Engine, LargeBinary, cast, func, select

from ..models import cronjob_queue as q

FIELDS = ("payload", "result_payload", "error", "process_logs")
CHUNK_CHARS = 1 << 19  # characters per statement of a download (at most 2 MiB of UTF-8,
#                       within the smallest max_allowed_packet MariaDB is allowed, 4 MiB)


def octet_length(conn: Connection, column):  # noqa: ANN001, ANN201
    """SQL expression: the UTF-8 size of `column` in bytes (NULL for NULL).

    SQLite before 3.43 has no OCTET_LENGTH; the length of the value cast to a BLOB is its
    size in bytes there (the database is UTF-8).
    """
    if conn.dialect.name == "sqlite":
        return func.length(cast(column, LargeBinary))
    return func.octet_length(column)


def job_heads(conn: Connection, job_id: int, head_chars: int) -> dict | None:
    """Row `job_id` with each of `FIELDS` cut to its first `head_chars` characters.

    Returns:
        The row as a dict of every column, where each field of `FIELDS` holds at most
        `head_chars` characters and `<field>_bytes` its whole size (bytes, None for NULL);
        None when there is no such row.
    """
    columns = [c for c in q.columns if c.name not in FIELDS]
    columns += [func.substr(q.c[f], 1, head_chars).label(f) for f in FIELDS]
    columns += [octet_length(conn, q.c[f]).label(f + "_bytes") for f in FIELDS]
    row = conn.execute(select(*columns).where(q.c.id == job_id)).mappings().first()
    return dict(row) if row else None


def field_size(conn: Connection, job_id: int, field: str) -> tuple[bool, int | None]:
    """`(row exists, size of its field in bytes or None for NULL)`.

    Raises:
        ValueError: `field` is not one of `FIELDS`.
    """
    if field not in FIELDS:
        raise ValueError(f"field must be one of {', '.join(FIELDS)}, got {field!r}")
    found = conn.execute(select(octet_length(conn, q.c[field]))
                         .where(q.c.id == job_id)).first()
    return (found is not None, found[0] if found else None)


def field_chunks(engine: Engine, job_id: int, field: str,
                 chunk_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """Yield the whole `field` of row `job_id`, `chunk_chars` characters at a time.

    One connection (and on PostgreSQL and MariaDB one REPEATABLE READ snapshot) serves
    every chunk, so a row changed meanwhile is read as it was at the first chunk there;
    the connection is given back when the iterator ends or is closed. Yields nothing for a
    NULL value or a missing row.

    Raises:
        ValueError: `field` is not one of `FIELDS`.
    """
    if field not in FIELDS:
        raise ValueError(f"field must be one of {', '.join(FIELDS)}, got {field!r}")
    with engine.connect() as conn:
        if conn.dialect.name != "sqlite":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            start = 1
            while True:
                chunk = conn.execute(select(func.substr(q.c[field], start, chunk_chars))
                                     .where(q.c.id == job_id)).scalar()
                if chunk:
                    yield chunk
                if chunk is None or len(chunk) < chunk_chars:
                    return
                start += chunk_chars
