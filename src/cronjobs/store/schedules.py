"""Schedule entries stored at run time (`cronjob_schedule`): the entries `<task>:<name>`
added with `cronjobs schedules add`, the dashboard's Schedules section or the API. A tick
reads them all in one statement (`list_schedules`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, select, update

from .models import cronjob_schedule

COLUMNS = ("task", "name", "cron", "timezone", "payload", "created_by", "created_at",
           "updated_at")


def list_schedules(conn: Connection) -> list[dict]:
    """Every stored entry, sorted by task and name: dicts of `COLUMNS` (`payload` is the
    stored JSON text; times naive UTC). One statement."""
    stmt = select(cronjob_schedule).order_by(cronjob_schedule.c.task, cronjob_schedule.c.name)
    return [dict(row._mapping) for row in conn.execute(stmt)]


def get_schedule(conn: Connection, task: str, name: str) -> dict | None:
    """The stored entry `task`:`name` (a dict of `COLUMNS`), or None."""
    row = conn.execute(select(cronjob_schedule).where(
        cronjob_schedule.c.task == task, cronjob_schedule.c.name == name)).first()
    return dict(row._mapping) if row is not None else None


def add_schedule(conn: Connection, *, task: str, name: str, cron: str, timezone: str | None,
                 payload: str, created_by: str | None, now: datetime) -> bool:
    """Insert the entry `task`:`name` unless it exists (checked under the caller's
    transaction; the primary key refuses a racing second insert).

    Args:
        payload: the entry's payload as JSON text.
        now: naive UTC, its `created_at` and `updated_at`.

    Returns:
        True when inserted, False when an entry of that name is stored already.
    """
    if get_schedule(conn, task, name) is not None:
        return False
    conn.execute(cronjob_schedule.insert().values(
        task=task, name=name, cron=cron, timezone=timezone, payload=payload,
        created_by=created_by, created_at=now, updated_at=now))
    return True


def update_schedule(conn: Connection, task: str, name: str, *, cron: str,
                    timezone: str | None, payload: str, now: datetime) -> bool:
    """Change the cron line, zone and payload (JSON text) of the stored entry; `now` (naive
    UTC) is its `updated_at`. Returns False when no such entry is stored."""
    result = conn.execute(update(cronjob_schedule).where(
        cronjob_schedule.c.task == task, cronjob_schedule.c.name == name).values(
        cron=cron, timezone=timezone, payload=payload, updated_at=now))
    return result.rowcount > 0


def delete_schedule(conn: Connection, task: str, name: str) -> bool:
    """Delete the stored entry (its runs and runtime row stay). Returns False when no such
    entry is stored."""
    result = conn.execute(delete(cronjob_schedule).where(
        cronjob_schedule.c.task == task, cronjob_schedule.c.name == name))
    return result.rowcount > 0
