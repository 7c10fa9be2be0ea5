"""`cronjob_queue` rows written and read through a Django connection (the caller's
transaction): the statements of the Tasks backend, in the `%s` placeholders of Django's
cursors, with values bound as cronjobs' own driver SQL binds them (`store.sql.bind`)."""

from __future__ import annotations

from datetime import UTC, datetime

from ...store.models import cronjob_queue
from ...store.sql import bind

TABLE = cronjob_queue.name
COLUMNS = ("id", "type", "status", "payload", "result_payload", "error", "traceback",
           "attempts", "created_at", "started_at", "finished_at", "updated_at", "worker_id")
# Django's `connection.vendor` and cronjobs' dialect names (`store.sql.name`).
DIALECTS = {"sqlite": "sqlite", "mysql": "mysql", "postgresql": "postgresql"}


def dialect_of(connection) -> str:
    """cronjobs' dialect name of a Django connection.

    Raises:
        ValueError: a vendor other than SQLite, PostgreSQL, MySQL/MariaDB (named).
    """
    try:
        return DIALECTS[connection.vendor]
    except KeyError:
        raise ValueError(f"cronjobs cannot write to a {connection.vendor!r} database "
                         f"(use SQLite, PostgreSQL or MySQL/MariaDB)") from None


def insert(connection, values: dict) -> int:
    """Insert one row (`job.rows.build_row`'s values, without an idempotency key) through
    the Django `connection`, in its current transaction; return the new row's id."""
    dialect = dialect_of(connection)
    columns = [c for c, v in values.items() if v is not None]
    sql = (f"INSERT INTO {TABLE} ({', '.join(columns)}) "
           f"VALUES ({', '.join('%s' for _ in columns)})")
    if dialect == "postgresql":
        sql += " RETURNING id"
    with connection.cursor() as cursor:
        cursor.execute(sql, [bind(dialect, values[c]) for c in columns])
        return cursor.fetchone()[0] if dialect == "postgresql" else cursor.lastrowid


def read(connection, job_id: int) -> dict | None:
    """The row `job_id` (the `COLUMNS`, times naive UTC datetimes), or None."""
    sql = f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE id = %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [job_id])
        found = cursor.fetchone()
    if found is None:
        return None
    row = dict(zip(COLUMNS, found, strict=True))
    for column in ("created_at", "started_at", "finished_at", "updated_at"):
        row[column] = _utc(row[column])
    return row


def _utc(value: object) -> datetime | None:
    """A time read through Django's cursor (SQLite may give text) as naive UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value
