"""Job rows through a connection cronjobs does not own: a Django connection (its
`vendor`, its `cursor()` with `%s` placeholders), in that connection's transaction (the
Django Tasks backend, `cronjobs.contrib.django`), and the SQLAlchemy URL of a Django
`DATABASES` entry. Values are bound as cronjobs' own driver SQL binds them (`sql.bind`).
Django itself is never imported here: the connection is duck-typed."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.engine import URL

from .models import cronjob_queue
from .sql import bind

TABLE = cronjob_queue.name
COLUMNS = ("id", "type", "status", "payload", "result_payload", "error", "traceback",
           "attempts", "created_at", "started_at", "finished_at", "updated_at", "worker_id")
# Django's `connection.vendor` and cronjobs' dialect names (`store.sql.name`).
DIALECTS = {"sqlite": "sqlite", "mysql": "mysql", "postgresql": "postgresql"}


# Django's database engines and the SQLAlchemy drivers cronjobs speaks for them.
DJANGO_DRIVERS = {
    "django.db.backends.sqlite3": "sqlite",
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.db.backends.mysql": "mysql+pymysql",
}


def django_url(entry: dict) -> str | None:
    """The SQLAlchemy URL of a Django `DATABASES` entry (its ENGINE, NAME, USER,
    PASSWORD, HOST, PORT; PostgreSQL's `OPTIONS["options"]`), or None for an ENGINE
    cronjobs cannot use."""
    driver = DJANGO_DRIVERS.get(entry.get("ENGINE", ""))
    if driver is None:
        return None
    if driver == "sqlite":
        return f"sqlite:///{entry['NAME']}"
    query = {"charset": "utf8mb4"} if driver.startswith("mysql") else {}
    if driver.startswith("postgresql") and (entry.get("OPTIONS") or {}).get("options"):
        query["options"] = entry["OPTIONS"]["options"]  # e.g. -csearch_path=...
    return URL.create(driver, username=entry.get("USER") or None,
                      password=entry.get("PASSWORD") or None, host=entry.get("HOST") or None,
                      port=int(entry["PORT"]) if entry.get("PORT") else None,
                      database=entry.get("NAME") or None,
                      query=query).render_as_string(hide_password=False)


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


def insert_row(connection, values: dict) -> int:
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


def read_row(connection, job_id: int) -> dict | None:
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
