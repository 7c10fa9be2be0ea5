"""Dependencies between rows (`cronjob_dependency`): a `waiting` row starts once the rows
it depends on have finished. The statements only; the decisions (release, cancel, cycles,
families) are `cronjobs.family.depends`'.

The one statement on the hot path is `dependents_of`: one indexed read per batch of
finished rows (`ix_cronjob_dependency_on`), nothing more when it finds nothing. The rows
of a dependency stay after the release (the job page shows what a row waited for); they
go with the dependent row (`ON DELETE CASCADE`).

Race-freedom of a release: the transaction that finishes a dependency locks each
`waiting` dependent (`lock_waiting`: `FOR UPDATE` in ascending id order; SQLite has one
writer, no lock clause), then reads its dependencies with a plain read. Two finishers of
two dependencies of one row serialise on that row's lock, and under READ COMMITTED (the
isolation of MariaDB and PostgreSQL here, `store.engines`) the second one's read, a new
statement after the lock was granted, sees the first one's commit: one of them releases.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.exc import DBAPIError

from .. import limits
from ..status import Reason, Status
from .models import cronjob_dependency as dep
from .models import cronjob_family as fam
from .models import cronjob_queue as q
from .models import cronjob_runtime as rt
from .sql import name

_CHUNK = 500  # ids per IN list (MariaDB turns a list past ~1,000 into a derived table)


def _chunks(ids: Iterable[int]) -> list[list[int]]:
    ordered = sorted({int(i) for i in ids})
    return [ordered[n:n + _CHUNK] for n in range(0, len(ordered), _CHUNK)]


def add(conn: Connection, rows_: Sequence[tuple[int, int, bool]]) -> None:
    """Insert `(job_id, depends_on_id, allow_failed)` in the caller's transaction (a new
    row's dependencies)."""
    if rows_:
        conn.execute(dep.insert(), [{"job_id": j, "depends_on_id": d, "allow_failed": bool(a)}
                                    for j, d, a in rows_])


def dependents_of(conn: Connection, ids: Iterable[int]) -> list[tuple[int, int]]:
    """`(job_id, depends_on_id)` of every row that depends on one of `ids` (released ones
    too: the caller keeps the `waiting` ones). One indexed statement per 500 ids: the
    finishing hot path, so it is sent on the driver's own cursor with the ids written into
    its text (integers), without SQLAlchemy's result objects: ~70-95 us a batch on
    PostgreSQL and MariaDB against ~120-180 us through `exec_driver_sql`.

    Raises:
        DBAPIError: the driver's error, wrapped as SQLAlchemy wraps it (a lost connection
            invalidates it).
    """
    out: list[tuple[int, int]] = []
    for chunk in _chunks(ids):
        sql = (f"SELECT job_id, depends_on_id FROM cronjob_dependency WHERE depends_on_id "
               f"IN ({', '.join(map(str, chunk))})")
        out += [(int(j), int(d)) for j, d in fetch_rows(conn, sql)]
    return out


def fetch_rows(conn: Connection, sql: str) -> list[tuple]:
    """The rows of `sql` (no parameters) read on the connection's DB-API cursor (the
    finishing path's reads: no SQLAlchemy result objects)."""
    dbapi_conn = conn.connection.dbapi_connection
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute(sql)
        return cursor.fetchall()
    except conn.dialect.loaded_dbapi.Error as exc:
        lost = conn.dialect.is_disconnect(exc, dbapi_conn, cursor)
        if lost:
            conn.invalidate()
        raise DBAPIError.instance(sql, None, exc, conn.dialect.loaded_dbapi.Error,
                                  connection_invalidated=lost) from None
    finally:
        cursor.close()


def dependencies_of(conn: Connection, job_ids: Iterable[int]
                    ) -> dict[int, list[tuple[int, bool]]]:
    """`{job_id: [(depends_on_id, allow_failed) ...]}` (ascending ids) of `job_ids`; a row
    without any is absent."""
    out: dict[int, list[tuple[int, bool]]] = {}
    for chunk in _chunks(job_ids):
        for job_id, on, allow in conn.execute(
                select(dep.c.job_id, dep.c.depends_on_id, dep.c.allow_failed)
                .where(dep.c.job_id.in_(chunk)).order_by(dep.c.job_id, dep.c.depends_on_id)):
            out.setdefault(job_id, []).append((on, bool(allow)))
    return out


def rows(conn: Connection, ids: Iterable[int], *, lock: bool = False) -> dict[int, dict]:
    """`{id: {id, status, root_id, parent_id, queue}}` of the rows of `ids` that exist.
    `lock`: lock them (`FOR UPDATE`, ascending ids; nothing on SQLite, one writer), so a
    dependency cannot finish between this read and the caller's commit without seeing
    what the caller wrote (its finishing UPDATE waits for the lock)."""
    out: dict[int, dict] = {}
    for chunk in _chunks(ids):
        stmt = (select(q.c.id, q.c.status, q.c.root_id, q.c.parent_id, q.c.queue)
                .where(q.c.id.in_(chunk)).order_by(q.c.id))
        if lock and name(conn) != "sqlite":
            stmt = stmt.with_for_update()
        out.update((r["id"], dict(r)) for r in conn.execute(stmt).mappings())
    return out


def lock_waiting(conn: Connection, ids: Iterable[int]) -> list[dict]:
    """Lock the rows of `ids` that are `waiting` (`FOR UPDATE`, ascending ids; SQLite: a
    plain read, one writer) and return `{id, queue, process_logs}` of each, ascending,
    with `type`, `callback_url`, `attempts`, `max_attempts` (a cancelled row's webhook)."""
    out: list[dict] = []
    for chunk in _chunks(ids):
        stmt = (select(q.c.id, q.c.queue, q.c.process_logs,
                       q.c.type, q.c.callback_url, q.c.attempts, q.c.max_attempts)
                .where(q.c.id.in_(chunk), q.c.status == Status.WAITING).order_by(q.c.id))
        if name(conn) != "sqlite":
            stmt = stmt.with_for_update()
        out += [dict(r) for r in conn.execute(stmt).mappings()]
    return out


def has_members(conn: Connection, root_id: int) -> bool:
    """True when a row of the family of `root_id` exists besides the root (`root_id` set
    on it): the root's dependents then wait for the whole family."""
    return conn.execute(select(q.c.id).where(q.c.root_id == root_id).limit(1)).first() is not None


def family_live(conn: Connection, root_id: int) -> bool:
    """True when a row of the family of `root_id` (the root excepted) is not finished
    (`pending`, `waiting` or `running`), from `ix_cronjob_queue_root_status`."""
    live = (Status.PENDING, Status.WAITING, Status.RUNNING)
    return conn.execute(select(q.c.id).where(q.c.root_id == root_id, q.c.status.in_(live))
                        .limit(1)).first() is not None


def family_outcome(conn: Connection, root_id: int) -> str | None:
    """The outcome (`success`, `failure`, `cancelled`) of the latest completion of the
    family of `root_id` (`cronjob_family`), or None when it never completed."""
    return conn.execute(select(fam.c.outcome).where(fam.c.root_id == root_id)
                        .order_by(fam.c.generation.desc()).limit(1)).scalar()


def family_statuses(conn: Connection, root_id: int) -> set[str]:
    """The distinct statuses of the family of `root_id`, the root excepted."""
    return {r[0] for r in conn.execute(select(q.c.status).distinct()
                                       .where(q.c.root_id == root_id))}


def waiting_members(conn: Connection, root_id: int, limit: int = 1000) -> list[int]:
    """Ids of the `waiting` rows of the family of `root_id` (at most `limit`)."""
    return [r[0] for r in conn.execute(select(q.c.id).where(
        q.c.root_id == root_id, q.c.status == Status.WAITING).order_by(q.c.id).limit(limit))]


def waiting_rows(conn: Connection, limit: int = 100) -> list[int]:
    """Ids of the oldest `waiting` rows (at most `limit`), from `ix_cronjob_queue_status_id`."""
    return [r[0] for r in conn.execute(select(q.c.id).where(q.c.status == Status.WAITING)
                                       .order_by(q.c.id).limit(limit))]


def _log(row: dict, now: datetime, text: str) -> str:
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    return limits.bounded_log(row.get("process_logs"), limits.log_line(f"[{stamp}] {text}") + "\n")


def release(conn: Connection, rows_: list[dict], now: datetime) -> None:
    """Make the locked `waiting` rows of `rows_` (`lock_waiting`'s) `pending`, due now,
    with a process-log line saying what they waited for (`row["after"]`, ids); a task
    whose last run one is (`AFTER`) shows `pending`."""
    if not rows_:
        return
    conn.execute(rt.update().where(rt.c.last_job_id.in_([r["id"] for r in rows_]),
                                   rt.c.last_status == Status.WAITING).values(
        last_status=Status.PENDING, updated_at=now))
    conn.execute(q.update().where(q.c.id == bindparam("b_id"), q.c.status == Status.WAITING)
                 .values(status=Status.PENDING, updated_at=now, process_logs=bindparam("b_log")),
                 [{"b_id": r["id"], "b_log": _log(r, now, "dependencies finished ("
                                                  + ", ".join(map(str, r["after"]))
                                                  + "): waiting -> pending")} for r in rows_])


def cancel(conn: Connection, rows_: list[dict], now: datetime) -> None:
    """Cancel the locked `waiting` rows of `rows_` (`lock_waiting`'s, each with its
    `error`, e.g. `dependency 12 failed`): `cancelled`, `finished_at`, reason
    `dependency_failed`, attempts untouched (no attempt used), a process-log line; a task
    whose last run it is shows `cancelled`."""
    if not rows_:
        return
    conn.execute(q.update().where(q.c.id == bindparam("b_id"), q.c.status == Status.WAITING)
                 .values(status=Status.CANCELLED, finished_at=now, updated_at=now,
                         locked_until=None, error=bindparam("b_error"),
                         outcome_reason=Reason.DEPENDENCY_FAILED,
                         process_logs=bindparam("b_log")),
                 [{"b_id": r["id"], "b_error": r["error"][:1000],
                   "b_log": _log(r, now, f"{r['error']}: waiting -> cancelled")} for r in rows_])
    conn.execute(rt.update().where(rt.c.last_job_id.in_([r["id"] for r in rows_])).values(
        last_status=Status.CANCELLED, updated_at=now))
