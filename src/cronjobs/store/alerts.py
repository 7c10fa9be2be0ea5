"""Statements on `cronjob_alert`: the open health problems and when each was last alerted."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select

from ..models import cronjob_alert as a


def open_problems(conn: Connection) -> dict[str, dict]:
    """Every open problem, keyed by its problem key (locked against a concurrent health run).

    Two health runs at the same time (two workers) serialize on these rows, so an alert is
    sent once.
    """
    stmt = select(a).order_by(a.c.problem)
    if conn.dialect.name != "sqlite":
        stmt = stmt.with_for_update()
    return {r["problem"]: dict(r) for r in conn.execute(stmt).mappings()}


def open_problem(conn: Connection, problem: str, status: str, message: str, now: datetime) -> None:
    """Record a new problem (not alerted yet)."""
    conn.execute(a.insert().values(problem=problem, status=status, message=message[:60000],
                                   first_seen_at=now, last_seen_at=now, last_sent_at=None))


def touch_problem(conn: Connection, problem: str, status: str, message: str, now: datetime,
                  sent: bool) -> None:
    """Note that `problem` is still open (and that an alert was just sent, when `sent`)."""
    values = {"status": status, "message": message[:60000], "last_seen_at": now}
    if sent:
        values["last_sent_at"] = now
    conn.execute(a.update().where(a.c.problem == problem).values(**values))


def close_problem(conn: Connection, problem: str) -> None:
    """Forget a problem that cleared."""
    conn.execute(a.delete().where(a.c.problem == problem))


def unsend(conn: Connection, problems: list[str]) -> None:
    """Take back the "alert sent" mark of `problems` (every channel failed: try next run)."""
    if problems:
        conn.execute(a.update().where(a.c.problem.in_(problems)).values(last_sent_at=None))
