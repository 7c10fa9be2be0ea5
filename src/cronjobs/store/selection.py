"""The rows of a bulk selection: its conditions, its snapshot of ids and its size.

A selection is either ticked ids (at most a page of them) or the filters of the Queue or
Failed page; either way only rows in the statuses the action works on are taken
(`statuses`). Each read is one range of an index that serves the filter: `(type, status,
id)` for types (named for MariaDB, whose optimizer otherwise intersects two indexes, many
times slower for a Failed group at 1,000,000 rows), `(parent_id)`, the primary key for
ticked ids, `(status, id)` else. Text in the title has no index: it is read in windows of
`TITLE_WINDOW` ids, one statement each, so no statement outlasts the dashboard's budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, false, func, literal, select

from .models import cronjob_queue as q
from .views import failure_group, hidden_types

TITLE_WINDOW = 100_000  # ids read per statement for a title filter


@dataclass(frozen=True)
class Where:
    """The rows of a selection, as SQL.

    Attributes:
        conds: conditions to be AND-ed.
        index: the index MariaDB is told to use (None: its own choice).
        windowed: read in windows of `TITLE_WINDOW` ids (a title filter).
    """

    conds: tuple
    index: str | None = None
    windowed: bool = False


def where(*, statuses: tuple[str, ...], types: tuple[str, ...] = (),
          failure: tuple[str, tuple[str, ...]] | None = None, parent: int | None = None,
          title: str | None = None, hide: tuple[str, ...] = (), ids: tuple[int, ...] = (),
          root: int | None = None, queue: str | None = None) -> Where:
    """The rows of a selection.

    Args:
        statuses: the row statuses the action works on (empty: no row at all).
        types: job types (none: any type).
        failure: a Failed-page group, `(fingerprint, unmarked)` (`views.failure_group`).
        parent: only children of this row.
        title: text contained in the title (LIKE, with `%` and `_` escaped).
        hide: types left out (`a.b.execute`, or a prefix `http.uptime.*`).
        ids: only these rows (ticked ones; keep it under 1,000: see `actions.retry_failed`).
        root: only rows under this family root (`root_id`: its descendants).
        queue: only rows of this queue.
    """
    if not statuses:
        return Where((false(),))
    conds = [q.c.status == statuses[0] if len(statuses) == 1 else q.c.status.in_(statuses)]
    if ids:
        conds.append(q.c.id.in_(ids))
    if types:
        conds.append(q.c.type == types[0] if len(types) == 1 else q.c.type.in_(types))
    if failure is not None:
        conds.append(failure_group(failure))
    if parent is not None:
        conds.append(q.c.parent_id == parent)
    if root is not None:
        conds.append(q.c.root_id == root)
    if queue is not None:
        conds.append(q.c.queue == queue)
    if title:
        conds.append(q.c.title.contains(title, autoescape=True))
    narrow = ids or parent is not None or root is not None  # an index of its own
    index = "ix_cronjob_queue_type_status" if types and not narrow else None
    return Where(tuple(conds + hidden_types(hide)), index, bool(title) and not narrow)


def _hinted(stmt, rows: Where):
    if rows.index is not None:
        for dialect in ("mysql", "mariadb"):
            stmt = stmt.with_hint(q, f"FORCE INDEX ({rows.index})", dialect_name=dialect)
    return stmt


def _windows(conn: Connection, rows: Where) -> list:
    """Extra conditions, one statement each: none, or the id windows of a title filter."""
    if not rows.windowed:
        return [()]
    low, high = conn.execute(select(func.min(q.c.id), func.max(q.c.id))).one()
    if high is None:
        return []
    return [(q.c.id.between(start, start + TITLE_WINDOW - 1),)
            for start in range(low, high + 1, TITLE_WINDOW)]


def select_ids(conn: Connection, rows: Where, limit: int | None = None) -> list[int]:
    """Ids of the rows of `rows`, ascending, at most `limit` (None: all): the snapshot of
    a selection."""
    ids: list[int] = []
    for window in _windows(conn, rows):
        stmt = _hinted(select(q.c.id).where(*rows.conds, *window).order_by(q.c.id), rows)
        if limit is not None:
            stmt = stmt.limit(limit - len(ids))
        ids += [r[0] for r in conn.execute(stmt)]
        if limit is not None and len(ids) >= limit:
            break
    return ids


def count_rows(conn: Connection, rows: Where, cap: int) -> tuple[int, bool]:
    """Rows of `rows`, counted up to `cap`: `(n, capped)` (the confirmation page, the
    Failed page's count of a group)."""
    n = 0
    for window in _windows(conn, rows):
        inner = _hinted(select(literal(1).label("one")).select_from(q)
                        .where(*rows.conds, *window).limit(cap + 1 - n), rows).subquery()
        n += conn.execute(select(func.count()).select_from(inner)).scalar_one()
        if n > cap:
            break
    return min(n, cap), n > cap
