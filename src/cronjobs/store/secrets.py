"""Secrets made once per database and shared by every process that uses it
(`cronjob_secret`): the first process to need one creates it, the others read it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Connection, select

from .models import cronjob_secret
from .sql import insert_ignore


def get_or_create(conn: Connection, name: str, make: Callable[[], str], now: datetime) -> str:
    """The secret `name`, created with `make()` when the database has none yet.

    Two processes that race here both end with the one value that was inserted first (the
    primary key decides; the loser's insert is skipped).

    Args:
        name: the secret's name (at most 64 characters).
        make: returns a new value (at most 255 characters).
        now: creation time, naive UTC.

    Returns:
        The stored value.
    """
    stmt = select(cronjob_secret.c.value).where(cronjob_secret.c.name == name)
    value = conn.execute(stmt).scalar()
    if value is None:
        conn.execute(insert_ignore(conn, cronjob_secret, ["name"]).values(
            name=name, value=make(), created_at=now))
        value = conn.execute(stmt).scalar_one()
    return value
