"""The rows of a bulk selection: its conditions, its snapshot of ids and its size.

A selection is either ticked ids (at most a page of them) or the filters of the Queue or
Failed page; either way only rows in the statuses the action works on are taken
(`statuses`). Every filter is one the pages' own lists use, on the same indexes.
"""

from __future__ import annotations

from sqlalchemy import Connection, false, select

from ..models import cronjob_queue as q
from .views import capped_count, error_key, hidden_types


def conditions(*, statuses: tuple[str, ...], types: tuple[str, ...] = (),
               error: str | None = None, parent: int | None = None, title: str | None = None,
               hide: tuple[str, ...] = (), ids: tuple[int, ...] = ()) -> list:
    """The WHERE conditions of a selection's rows.

    Args:
        statuses: the row statuses the action works on (empty: no row at all).
        types: job types (none: any type).
        error: the error key (first 200 characters of `error`: a Failed-page group).
        parent: only children of this row.
        title: text contained in the title (LIKE, with `%` and `_` escaped).
        hide: types left out (`a.b.execute`, or a prefix `http.uptime.*`).
        ids: only these rows (ticked ones; keep it under 1,000: see `actions.retry_failed`).

    Returns:
        A list of SQLAlchemy conditions, to be AND-ed.
    """
    if not statuses:
        return [false()]
    conds = [q.c.status == statuses[0] if len(statuses) == 1 else q.c.status.in_(statuses)]
    if ids:
        conds.append(q.c.id.in_(ids))
    if types:
        conds.append(q.c.type == types[0] if len(types) == 1 else q.c.type.in_(types))
    if error is not None:
        conds.append(error_key() == error)
    if parent is not None:
        conds.append(q.c.parent_id == parent)
    if title:
        conds.append(q.c.title.contains(title, autoescape=True))
    return conds + hidden_types(hide)


def select_ids(conn: Connection, conds: list, limit: int | None = None) -> list[int]:
    """Ids of the rows matching `conds`, ascending, at most `limit` (None: all): the
    snapshot of a selection."""
    stmt = select(q.c.id).where(*conds).order_by(q.c.id)
    if limit is not None:
        stmt = stmt.limit(limit)
    return [r[0] for r in conn.execute(stmt)]


def count_rows(conn: Connection, conds: list, cap: int) -> tuple[int, bool]:
    """Rows matching `conds`, counted up to `cap`: `(n, capped)` (the confirmation page)."""
    return capped_count(conn, *conds, cap=cap)
