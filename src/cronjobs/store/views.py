"""Read queries of the dashboard, `health` and `/metrics`, built to stay cheap at millions of rows
(the per-queue reads are in `queues`).

Every list is a keyset page (`id < before` / `id > after`, never a deep OFFSET) on an
index that matches its filter: `(status, id)`, `(type, status, id)`, `(parent_id)` or the
primary key. Counts are capped (`SELECT COUNT(*) FROM (... LIMIT cap + 1)`): the page shows
"10,000+" instead of counting a million rows. A title search looks at a bounded window of
ids at a time. `tests/test_dashboard_explain.py` runs `EXPLAIN` on every query here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection, case, func, literal, select

from ..status import FINAL, Status
from .models import STATUSES, cronjob_family, cronjob_slot
from .models import cronjob_queue as q
from .models import cronjob_runtime as rt

COUNT_CAP = 10_000
SEARCH_WINDOW = 100_000  # ids looked at per page of a title search
ERROR_KEY_CHARS = 200  # failed rows are grouped by type and the first 200 characters of error
LIST_COLUMNS = ("id", "type", "queue", "status", "priority", "attempts", "max_attempts",
                "title", "parent_id", "scheduled_at", "started_at", "finished_at", "created_at")


@dataclass
class Page:
    """One keyset page of rows, newest first.

    Attributes:
        rows: row dicts (`LIST_COLUMNS` plus `error`, cut to 200 characters).
        newer: pass as `after=` for the page of newer rows (None on the newest page).
        older: pass as `before=` for the next page of older rows (None on the last one).
        searched_to: for a title search that ended its id window early: the lowest id
            looked at; `before=searched_to` searches further back.
    """

    rows: list[dict] = field(default_factory=list)
    newer: int | None = None
    older: int | None = None
    searched_to: int | None = None


def error_key(column=q.c.error):
    """SQL expression: the part of `error` that groups failed rows (first 200 characters)."""
    return func.substr(func.coalesce(column, literal("")), 1, ERROR_KEY_CHARS)


def _list_select():
    return select(*(q.c[c] for c in LIST_COLUMNS), error_key().label("error"))


def list_rows(conn: Connection, *, status: str | None = None, types: list[str] | None = None,
              parent_id: int | None = None, title: str | None = None,
              before: int | None = None, after: int | None = None, limit: int = 50,
              hide: tuple[str, ...] = (),
              failure: tuple[str, tuple[str, ...]] | None = None,
              queue: str | None = None) -> Page:
    """A page of `cronjob_queue` rows, newest first, filtered and keyset-paginated.

    Args:
        status: one of the row statuses, or None for all.
        types: job types (a task's types); several types are read one index range each
            and merged, so a page never sorts all rows of a task.
        parent_id: only children of this row.
        title: text contained in the title (LIKE, with `%`/`_` escaped); searched in
            windows of `SEARCH_WINDOW` ids.
        before / after: ids from a previous page's `older` / `newer`.
        limit: rows per page (1 to 500).
        hide: types left out (`a.b.execute`, or a prefix `http.uptime.*`); searched in
            windows of `SEARCH_WINDOW` ids, like a title.
        failure: only rows of this Failed-page group, `(fingerprint, unmarked)` (see
            `failure_group`).
        queue: only rows of this queue.

    Returns:
        A `Page`.
    """
    limit = max(1, min(int(limit), 500))
    conds, window_low = _conditions(conn, status, parent_id, title, before, after, hide,
                                    failure)
    if queue is not None:
        conds.append(q.c.queue == queue)
    ascending = after is not None and before is None
    rows: list[dict] = []
    for job_type in (types or [None]):
        stmt = _list_select().where(*conds)
        if job_type is not None:
            stmt = stmt.where(q.c.type == job_type)
        if parent_id is None and not title and queue is None:
            stmt = _force_index(stmt, job_type is not None, bool(status))
        stmt = stmt.order_by(q.c.id.asc() if ascending else q.c.id.desc()).limit(limit + 1)
        rows.extend(dict(r) for r in conn.execute(stmt).mappings())
    page = _page(rows, limit, ascending, before is not None)
    if window_low is not None and page.older is None and window_low > 0:
        page.searched_to = window_low
    return page


def _conditions(conn: Connection, status: str | None, parent_id: int | None,
                title: str | None, before: int | None, after: int | None,
                hide: tuple[str, ...],
                failure: tuple[str, tuple[str, ...]] | None) -> tuple[list, int | None]:
    """`(conditions, lowest id looked at or None)` of a `list_rows` page (its types aside)."""
    conds = []
    if status:
        conds.append(q.c.status == status)
    if parent_id is not None:
        conds.append(q.c.parent_id == parent_id)
    if failure is not None:
        conds.append(failure_group(failure))
    window_low = None
    conds += hidden_types(hide)
    if title:
        conds.append(q.c.title.contains(title, autoescape=True))
    if title or hide:
        window_low, window = _window(conn, before, after)
        conds.append(window)
    if after is not None and before is None:
        conds.append(q.c.id > after)
    elif before is not None:
        conds.append(q.c.id < before)
    return conds, window_low


def _page(rows: list[dict], limit: int, ascending: bool, has_before: bool) -> Page:
    """The `Page` of up to `limit + 1` rows read (newest first in the result)."""
    rows.sort(key=lambda r: r["id"], reverse=not ascending)
    more = len(rows) > limit
    rows = rows[:limit]
    if ascending:
        rows.reverse()
    page = Page(rows)
    if rows:
        page.newer = rows[0]["id"] if (more if ascending else has_before) else None
        page.older = rows[-1]["id"] if ascending or more else None
    return page


def _window(conn: Connection, before: int | None, after: int | None):
    """`(lowest id looked at or None, condition)`: the `SEARCH_WINDOW` ids of a page."""
    if after is None:
        top = before if before is not None else (max_id(conn) or 0) + 1
        low = max(0, top - SEARCH_WINDOW)
        return low, q.c.id >= low
    return None, q.c.id <= after + SEARCH_WINDOW


def hidden_types(hide: tuple[str, ...]) -> list:
    """Conditions leaving out the types of `hide` (exact, or a prefix ending in `.*`)."""
    exact = [t for t in hide if not t.endswith(".*")]
    conds = [q.c.type.not_in(exact)] if exact else []
    return conds + [~q.c.type.startswith(t[:-1], autoescape=True)
                    for t in hide if t.endswith(".*")]


def _force_index(stmt, by_type: bool, by_status: bool):
    """MariaDB: name the index that serves `WHERE ... ORDER BY id DESC LIMIT n`.

    With a million rows its optimizer may otherwise intersect (status, id) and
    (type, status, id) and sort every matching row (hundreds of times slower).
    InnoDB appends the primary key to each secondary index, so `ix_cronjob_queue_type`
    is (type, id). PostgreSQL and SQLite choose well on their own.
    """
    if by_type and by_status:
        index = "ix_cronjob_queue_type_status"
    elif by_type:
        index = "ix_cronjob_queue_type"
    elif by_status:
        index = "ix_cronjob_queue_status_id"
    else:
        return stmt
    for dialect in ("mysql", "mariadb"):
        stmt = stmt.with_hint(q, f"FORCE INDEX ({index})", dialect_name=dialect)
    return stmt


def max_id(conn: Connection) -> int | None:
    """The highest row id (None for an empty table)."""
    return conn.execute(select(func.max(q.c.id))).scalar()


def capped_count(conn: Connection, *conds, cap: int = COUNT_CAP) -> tuple[int, bool]:
    """Count rows matching `conds`, stopping at `cap`.

    Returns:
        `(n, capped)`: `capped` is True when more than `cap` rows match (n is then `cap`).
    """
    inner = select(literal(1).label("one")).select_from(q).where(*conds).limit(cap + 1).subquery()
    n = conn.execute(select(func.count()).select_from(inner)).scalar_one()
    return min(n, cap), n > cap


def ping(conn: Connection) -> None:
    """`SELECT 1`: the database answers."""
    conn.execute(select(literal(1))).scalar()


def failed_counts(conn: Connection, since: datetime, cap: int = COUNT_CAP) -> dict:
    """Failed rows: `{"total": (n, capped), "since": (n, capped)}` (finished at or after
    `since`)."""
    return {"total": capped_count(conn, q.c.status == Status.FAILED, cap=cap),
            "since": capped_count(conn, q.c.status == Status.FAILED, q.c.finished_at >= since,
                                  cap=cap)}


def count_by_status(conn: Connection, types: list[str] | None = None,
                    cap: int = COUNT_CAP, *, parent_id: int | None = None,
                    queue: str | None = None) -> dict[str, tuple[int, bool]]:
    """Capped row counts per status of the rows of `types`, `parent_id` and `queue` (each
    only when given): `{status: (n, capped)}`.

    The children of a parent are counted in one grouped read of `ix_cronjob_queue_parent`
    (exact: a family's size); else one capped count per status on the `(type, status,
    id)`, claim `(queue, status, ...)` or `(status, id)` index."""
    if parent_id is not None:
        return _children_by_status(conn, parent_id, types, queue)
    counts = {}
    for status in STATUSES:
        n, capped = 0, False
        for job_type in (types or [None]):  # one (type, status) index range each
            conds = [q.c.status == status] + ([q.c.type == job_type] if job_type else [])
            conds += [q.c.queue == queue] if queue is not None else []
            part, more = capped_count(conn, *conds, cap=cap - n)
            n, capped = n + part, capped or more
            if capped:
                break
        counts[status] = (n, capped)
    return counts


def _children_by_status(conn: Connection, parent_id: int, types: list[str] | None,
                        queue: str | None) -> dict[str, tuple[int, bool]]:
    """`count_by_status` of the children of `parent_id` (of `types`, `queue`)."""
    stmt = (select(q.c.status, func.count()).where(q.c.parent_id == parent_id)
            .group_by(q.c.status))
    if types:
        stmt = stmt.where(q.c.type.in_(types))
    if queue is not None:
        stmt = stmt.where(q.c.queue == queue)
    found = {str(status): int(n) for status, n in conn.execute(stmt)}
    return {status: (found.get(status, 0), False) for status in STATUSES}


def throughput(conn: Connection, now: datetime, cap: int = 100_000) -> dict[str, tuple[int, bool]]:
    """Completed `.execute` rows finished in the last hour and day:
    `{"hour": (n, capped), "day": ...}`.

    Only execute rows count as work done (docs/handlers.md); discover rows are discovery. One
    range read of the (status, finished_at, type) index serves both figures.
    """
    hour_ago = now - timedelta(hours=1)
    inner = (select(q.c.finished_at).where(
        q.c.status == Status.COMPLETED, q.c.finished_at >= now - timedelta(days=1),
        q.c.type.like("%.execute")).limit(cap + 1).subquery())
    day, hour = conn.execute(select(
        func.count(),
        func.coalesce(func.sum(case((inner.c.finished_at >= hour_ago, 1), else_=0)), 0)
    )).one()
    return {"hour": (min(int(hour), cap), int(hour) > cap), "day": (min(day, cap), day > cap)}


def children_counts(conn: Connection, parent_ids: list[int]) -> dict[int, dict[str, int]]:
    """Children per status of each of `parent_ids`: `{parent_id: {status: n}}`."""
    if not parent_ids:
        return {}
    stmt = (select(q.c.parent_id, q.c.status, func.count().label("n"))
            .where(q.c.parent_id.in_(parent_ids)).group_by(q.c.parent_id, q.c.status))
    out: dict[int, dict[str, int]] = {}
    for row in conn.execute(stmt):
        out.setdefault(row.parent_id, {})[row.status] = row.n
    return out


GROUP_SCAN = 5_000


def failed_groups(conn: Connection, job_type: str | None = None,
                  scan: int = GROUP_SCAN) -> list[dict]:
    """Failed rows grouped by type and stored fingerprint (`cronjob_queue.fingerprint`);
    rows without one (written before migration 0013) by type and error key (first 200
    characters), which `cronjobs.job.failures.groups` turns into their fingerprint.

    Only the newest `scan` (5,000) failed rows are grouped, so the page stays cheap with a
    million rows; the retry of a group still reaches every row of it.

    Returns:
        `[{type, fingerprint, error, count, newest_id, newest_at, oldest_id}]`: `error`
        is the error key of a group without a fingerprint, else None.
    """
    legacy = case((q.c.fingerprint.is_(None), error_key()), else_=None)
    inner = (select(q.c.id, q.c.type, q.c.finished_at, q.c.fingerprint,
                    legacy.label("error_key"))
             .where(q.c.status == Status.FAILED).order_by(q.c.id.desc()).limit(scan))
    if job_type:
        inner = inner.where(q.c.type == job_type)
    sub = inner.subquery()
    stmt = (select(sub.c.type, sub.c.fingerprint, sub.c.error_key, func.count().label("n"),
                   func.max(sub.c.id).label("newest_id"), func.min(sub.c.id).label("oldest_id"),
                   func.max(sub.c.finished_at).label("newest_at"))
            .group_by(sub.c.type, sub.c.fingerprint, sub.c.error_key))
    groups = [{"type": r.type, "fingerprint": r.fingerprint, "error": r.error_key,
               "count": r.n, "newest_id": r.newest_id, "newest_at": r.newest_at,
               "oldest_id": r.oldest_id} for r in conn.execute(stmt)]
    groups.sort(key=lambda g: (-g["count"], -g["newest_id"]))
    return groups


def error_keys(conn: Connection, ids: list[int], chunk: int = 500) -> dict[int, str]:
    """`{id: error key}` (first 200 characters of `error`) of rows `ids` (the examples of
    the Failed page's groups); missing ids are left out."""
    out: dict[int, str] = {}
    for start in range(0, len(ids), chunk):
        stmt = select(q.c.id, error_key().label("k")).where(q.c.id.in_(ids[start:start + chunk]))
        out.update((r.id, r.k) for r in conn.execute(stmt))
    return out


def failed_total(conn: Connection, job_type: str | None = None,
                 cap: int = COUNT_CAP) -> tuple[int, bool]:
    """Failed rows (of `job_type`), counted up to `cap`: `(n, capped)` (the Failed page's
    "Retry all N"). A range of the `(status, id)` or `(type, status, id)` index."""
    conds = [q.c.status == Status.FAILED] + ([q.c.type == job_type] if job_type else [])
    return capped_count(conn, *conds, cap=cap)


def failure_of(conn: Connection, job_id: int) -> dict | None:
    """`{type, fingerprint, error}` of failed row `job_id` (`error`: its error key, first
    200 characters), or None when there is no such failed row."""
    row = conn.execute(select(q.c.type, q.c.fingerprint, error_key().label("k"))
                       .where(q.c.id == job_id, q.c.status == Status.FAILED)).first()
    return {"type": row.type, "fingerprint": row.fingerprint, "error": row.k} if row else None


def failure_group(failure: tuple[str, tuple[str, ...]]):
    """SQL condition: the rows of a Failed-page group `(fingerprint, unmarked)`: its
    stored `fingerprint`, or none stored and an error key among `unmarked` (rows written
    before migration 0013 or failed by recover-stale, grouped by the fingerprint computed
    from those texts: `cronjobs.job.failures.groups`)."""
    fingerprint, unmarked = failure
    cond = q.c.fingerprint == fingerprint
    if unmarked:
        cond = cond | (q.c.fingerprint.is_(None) & error_key().in_(unmarked))
    return cond


def first_slot_at(conn: Connection, task: str) -> datetime | None:
    """When the scheduler first started `task` (its oldest slot record), or None."""
    stmt = (select(cronjob_slot.c.claimed_at).where(cronjob_slot.c.task == task)
            .order_by(cronjob_slot.c.slot).limit(1))
    return conn.execute(stmt).scalar()


def last_tick_at(conn: Connection) -> datetime | None:
    """The latest scheduled start of any task: the scheduler's last tick that started work."""
    return conn.execute(select(func.max(rt.c.last_run_at))).scalar()


def job_statuses(conn: Connection, ids: list[int]) -> dict[int, str]:
    """`{id: status}` of the given rows (missing ids are left out)."""
    ids = [i for i in ids if i is not None]
    if not ids:
        return {}
    return {r.id: r.status for r in conn.execute(select(q.c.id, q.c.status).where(q.c.id.in_(ids)))}


def finished_since(conn: Connection, since: datetime, after_id: int,
                   limit: int = 10_000) -> list[dict]:
    """Rows finished at or after `since` (then by id above `after_id` at that instant), oldest
    first: what `/metrics` has not counted yet.

    Returns:
        `[{id, type, queue, status, attempts, started_at, finished_at, outcome_reason}]`.
    """
    stmt = (select(q.c.id, q.c.type, q.c.queue, q.c.status, q.c.attempts, q.c.started_at,
                   q.c.finished_at, q.c.outcome_reason)
            .where(q.c.status.in_(FINAL),
                   (q.c.finished_at > since) | ((q.c.finished_at == since) & (q.c.id > after_id)))
            .order_by(q.c.finished_at, q.c.id).limit(limit))
    return [dict(r) for r in conn.execute(stmt).mappings()]


def last_completed_root(conn: Connection, job_type: str) -> int | None:
    """The id of the newest parentless row of `job_type` whose family has completed (a
    `cronjob_family` record), or None: a task's last ended run (EXPECT's duration).
    Reads `ix_cronjob_queue_type` newest first."""
    done = select(cronjob_family.c.root_id).where(cronjob_family.c.root_id == q.c.id).exists()
    stmt = (select(q.c.id).where(q.c.type == job_type, q.c.parent_id.is_(None), done)
            .order_by(q.c.id.desc()).limit(1))
    return conn.execute(stmt).scalar()
