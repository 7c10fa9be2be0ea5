"""Reads of `cronjob_queue` rows: one row, the holder of a key, a row's children, the live
row of a family."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from sqlalchemy import Connection, func, select

from ..errors import InvalidJob
from ..status import Status
from .models import cronjob_queue as q
from .sql import locking_read

JOB_COLUMNS = tuple(c.name for c in q.columns)
LIVE = (Status.PENDING, Status.WAITING, Status.RUNNING)  # a waiting row is still going
_FAMILIES_PER_STATEMENT = 500


def get_job(conn: Connection, job_id: int, columns: Iterable[str] | None = None) -> dict | None:
    """Return the row `job_id` as a dict of `columns` (all when None), or None.

    Raises:
        InvalidJob: a column name is not a column of `cronjob_queue`.
    """
    cols = _columns(columns)
    row = conn.execute(select(*cols).where(q.c.id == job_id)).mappings().first()
    return dict(row) if row else None


def select_by_key(conn: Connection, key: str) -> dict | None:
    """Return `{id, status, payload}` of the row holding `key` (latest committed), or None."""
    stmt = locking_read(conn, select(q.c.id, q.c.status, q.c.payload)
                        .where(q.c.idempotency_key == key))
    row = conn.execute(stmt).mappings().first()
    return dict(row) if row else None


def family_roots(conn: Connection, ids: Sequence[int]) -> dict[int, int]:
    """The family root of each existing row of `ids`: its `root_id`, or the row itself
    when it has none. One read by primary key."""
    return {int(i): int(r or i) for i, r in conn.execute(
        select(q.c.id, q.c.root_id).where(q.c.id.in_(list(ids))))}


def get_children(conn: Connection, parent_id: int, columns: Iterable[str] | None = None,
                 status: str | None = None) -> list[dict]:
    """The rows whose parent is `parent_id` as dicts of `columns` (all when None), lowest
    id first, of `status` only when given (`ix_cronjob_queue_parent`).

    Raises:
        InvalidJob: a column name is not a column of `cronjob_queue`.
    """
    stmt = select(*_columns(columns)).where(q.c.parent_id == parent_id)
    if status is not None:
        stmt = stmt.where(q.c.status == status)
    return [dict(r) for r in conn.execute(stmt.order_by(q.c.id)).mappings()]


def count_children(conn: Connection, job_id: int) -> int:
    """Number of rows whose parent is `job_id`."""
    return conn.execute(select(func.count()).select_from(q)
                        .where(q.c.parent_id == job_id)).scalar_one()


def live_in_families(conn: Connection, root_ids: Sequence[int],
                     families: Collection[int] | None = None) -> dict[int, int]:
    """One `pending`, `waiting` or `running` row of each family in `root_ids` (the root
    itself first, else its lowest live descendant: a row whose `root_id` is the root; else
    a live callback row of its completion: `parent_id` the root, no `root_id`).

    At most three statements per 500 roots whatever the table's size: the roots by primary
    key, then `ix_cronjob_queue_root_status` (root_id, status, id) for the others that are
    in `families`, which reads only the index entries of their live descendants (nothing
    for a family that has ended, 20,000 entries for a fan-out with 20,000 rows still to
    run). The ids are integers written into the SQL text (once per tick: no 500-value
    parameter list to bind).

    Args:
        root_ids: ids of family roots (a task's last scheduled run).
        families: the roots whose descendants count (a discover's run); None: all.

    Returns:
        root id -> id of a live row of its family; families with none are absent.
    """
    roots = sorted({int(r) for r in root_ids})
    live: dict[int, int] = {}
    mysql = conn.dialect.name in ("mysql", "mariadb")
    hint = " FORCE INDEX (ix_cronjob_queue_root_status)" if mysql else ""
    by_parent = " FORCE INDEX (ix_cronjob_queue_parent)" if mysql else ""
    for start in range(0, len(roots), _FAMILIES_PER_STATEMENT):
        chunk = roots[start:start + _FAMILIES_PER_STATEMENT]
        # the status is filtered here: with it in the WHERE, MariaDB may read every live
        # row of the table through (status, locked_until) instead of the primary key
        ids = ", ".join(map(str, chunk))
        for job_id, status in conn.exec_driver_sql(
                f"SELECT id, status FROM cronjob_queue WHERE id IN ({ids})"):
            if status in LIVE:
                live[job_id] = job_id
        rest = [r for r in chunk if r not in live and (families is None or r in families)]
        if rest:
            # MariaDB would rather read every live row of the table (status, id) when the
            # families are small (seen with 30,000 rows): only theirs, through the index
            live.update((root, job_id) for root, job_id in conn.exec_driver_sql(
                f"SELECT root_id, MIN(id) FROM cronjob_queue{hint} WHERE root_id IN "
                f"({', '.join(map(str, rest))}) AND status IN ('pending', 'waiting', 'running') "
                f"GROUP BY root_id"))
        rest = [r for r in rest if r not in live]
        if rest:  # a family's callback rows (parent the root, no root_id) are its end
            live.update((root, job_id) for root, job_id in conn.exec_driver_sql(
                f"SELECT parent_id, MIN(id) FROM cronjob_queue{by_parent} WHERE parent_id IN "
                f"({', '.join(map(str, rest))}) AND root_id IS NULL "
                f"AND status IN ('pending', 'waiting', 'running') GROUP BY parent_id"))
    return live


def _columns(columns: Iterable[str] | None) -> list:
    if columns is None:
        return list(q.columns)
    names = list(columns)
    unknown = [c for c in names if c not in q.c]
    if unknown:
        raise InvalidJob(f"unknown column {unknown[0]!r}; columns are: {', '.join(JOB_COLUMNS)}")
    return [q.c[c] for c in names]


OUTCOME_COLUMNS = ("id", "status", "result_payload", "error", "finished_at")
_OUTCOMES_PER_STATEMENT = 1000


def outcomes(conn: Connection, ids: Collection[int]) -> dict[int, dict]:
    """`{id, status, result_payload, error, finished_at}` of each existing row of `ids`
    (one statement per 1,000 ids; `queue.wait` and the dashboard's shared result waiter),
    keyed by id; an id without a row is missing from the answer. Times naive UTC."""
    found: dict[int, dict] = {}
    wanted = sorted(set(ids))
    for start in range(0, len(wanted), _OUTCOMES_PER_STATEMENT):
        chunk = wanted[start:start + _OUTCOMES_PER_STATEMENT]
        stmt = select(*(q.c[c] for c in OUTCOME_COLUMNS)).where(q.c.id.in_(chunk))
        found.update((row["id"], dict(row)) for row in conn.execute(stmt).mappings())
    return found
