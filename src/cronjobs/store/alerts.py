"""Statements on `cronjob_alert`: one row per health problem being watched (see
`cronjobs.health.alertstate` for what the columns mean).

An alert pass locks every row, decides, and claims the rows it will send about
(`sending_until`) in one transaction; after sending it records the delivery (or releases
the claim) in another. Two passes at once serialize on the row locks, and a row claimed
by one is left alone by the other, so a message is sent once.
"""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import Connection, func, select

from .models import cronjob_alert as a
from .sql import insert_ignore

MESSAGE_CHARS = 2_000  # a problem's message is one line; cut so any row fits
STATE_COLUMNS = ("check_name", "status", "message", "state", "runs", "state_since", "changes",
                 "first_seen_at", "last_seen_at", "sending_until")


def lock_rows(conn: Connection, fresh: dict[str, dict]) -> dict[str, dict]:
    """Every row, locked, after inserting the rows of `fresh` problems not watched yet.

    Args:
        fresh: `{problem key: row}` (`alertstate.new_row`) for every problem failing now;
            those whose key has a row already are not inserted.

    Returns:
        `{problem key: row}` with `changes` as a list of naive UTC datetimes.
    """
    rows = _locked(conn)
    missing = sorted(k for k in fresh if k not in rows)
    for key in missing:  # a concurrent pass may insert the same key: it waits, then skips
        conn.execute(insert_ignore(conn, a, ["problem"]).values(**_encode(fresh[key])))
    if missing:
        rows.update(_locked(conn, missing))
    return rows


def _locked(conn: Connection, keys: list[str] | None = None) -> dict[str, dict]:
    stmt = select(a).order_by(a.c.problem)
    if keys is not None:
        stmt = stmt.where(a.c.problem.in_(keys))
    if conn.dialect.name != "sqlite":  # SQLite serializes writers instead
        stmt = stmt.with_for_update()
    return {r["problem"]: _decode(dict(r)) for r in conn.execute(stmt).mappings()}


def save(conn: Connection, row: dict) -> None:
    """Write a row's state (not its delivery columns, which only `settle` writes)."""
    values = {c: v for c, v in _encode(row).items() if c in STATE_COLUMNS}
    conn.execute(a.update().where(a.c.problem == row["problem"]).values(**values))


def delete(conn: Connection, problem: str) -> None:
    """Stop watching `problem` (it passes, nothing is owed, no recent change)."""
    conn.execute(a.delete().where(a.c.problem == problem))


def settle(conn: Connection, claims: dict[str, str], claim: datetime, now: datetime,
           delivered: bool) -> None:
    """Record the end of a send.

    Args:
        claims: `{problem key: kind}` sent (kinds of `alertstate.KINDS`).
        claim: the `sending_until` the pass wrote; a row claimed anew since is left alone.
        now: the pass's time (naive UTC).
        delivered: True when a channel took the message (or none is configured): problems
            are then alerted, recoveries end the alert; False releases the claim only, so
            the next pass sends again.
    """
    for recovered in (False, True):
        keys = [k for k, kind in claims.items() if (kind == "recovered") == recovered]
        if not keys:
            continue
        values: dict = {"sending_until": None}
        if delivered and recovered:
            values.update(alerted_at=None, last_sent_at=None)
        elif delivered:
            values.update(alerted_at=func.coalesce(a.c.alerted_at, now), last_sent_at=now)
        conn.execute(a.update().where(a.c.problem.in_(keys), a.c.sending_until == claim)
                     .values(**values))


def _encode(row: dict) -> dict:
    out = dict(row)
    out["message"] = (row["message"] or "")[:MESSAGE_CHARS]
    out["check_name"] = (row["check_name"] or "")[:64] or None
    out["changes"] = json.dumps([c.isoformat() for c in row["changes"]])
    return out


def _decode(row: dict) -> dict:
    row["changes"] = [datetime.fromisoformat(c) for c in json.loads(row["changes"] or "[]")]
    return row
