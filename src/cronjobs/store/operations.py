"""Bulk operations: the operation row, its snapshot of row ids in batches, its lease.

One operation runs per selection: `running_key` (the selection's hash while it runs, NULL
after) is unique, so of two starters (two dashboards, a dashboard and the CLI) one inserts
and the other finds the row. The runner holds a lease on the database's clock
(`lease_until`, as the worker's leases: hosts' clocks cannot disagree about it), renewed
by every batch; an operation whose lease ran out is stalled and may be taken over
(`take_over`, a compare-and-set on the lease). Every batch is fenced by `owner`
(`record_batch`): a runner that lost its operation to a takeover writes nothing more.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, case, select

from .models import cronjob_operation as op
from .models import cronjob_operation_batch as ob
from .sql import db_now, insert_ignore

OPERATION_COLUMNS = ("id", "action", "selection", "status", "total_rows", "done_rows",
                     "changed_rows", "created_by", "created_host", "owner", "lease_until",
                     "error", "created_at", "updated_at", "finished_at")


def insert_operation(conn: Connection, *, action: str, selection: str, running_key: str,
                     created_by: str, created_host: str, owner: str, lease_seconds: float,
                     now: datetime) -> int | None:
    """Insert a running operation for `selection`, held by `owner` for `lease_seconds`.

    A second inserter of the same `running_key` waits for the first transaction (a unique
    index) and then inserts nothing: "one running per selection" is the database's answer.
    MariaDB's INSERT IGNORE is safe here: the table has no foreign key and every value is
    bounded by the caller.

    Returns:
        The new operation's id, or None when an operation of this selection is running.
    """
    result = conn.execute(insert_ignore(conn, op, ["running_key"]).values(
        action=action, selection=selection, running_key=running_key, status="running",
        total_rows=0, done_rows=0, changed_rows=0, created_by=created_by,
        created_host=created_host, owner=owner, lease_until=db_now(conn, lease_seconds),
        created_at=now, updated_at=now).execution_options(preserve_rowcount=True))
    # psycopg 3 drops an INSERT's rowcount (-1) unless SQLAlchemy is asked to keep it.
    if result.rowcount != 1:
        return None
    return result.inserted_primary_key[0]


def add_batches(conn: Connection, operation_id: int, batches: list[list[int]]) -> None:
    """Store the snapshot of `operation_id`: `batches[i]` (ascending ids) as batch i."""
    if batches:
        conn.execute(ob.insert(), [{"operation_id": operation_id, "seq": i,
                                    "ids": ",".join(map(str, ids))}
                                   for i, ids in enumerate(batches)])


def set_total(conn: Connection, operation_id: int, total: int, now: datetime) -> None:
    """Record the snapshot's size; an empty snapshot finishes the operation at once."""
    values = {"total_rows": total, "updated_at": now}
    if total == 0:
        values.update(status="done", running_key=None, owner=None, lease_until=None,
                      finished_at=now)
    conn.execute(op.update().where(op.c.id == operation_id).values(**values))


def next_batch(conn: Connection, operation_id: int) -> tuple[int, list[int]] | None:
    """The lowest batch left of `operation_id`: `(seq, ids)`, or None when all are done."""
    row = conn.execute(select(ob.c.seq, ob.c.ids).where(ob.c.operation_id == operation_id)
                       .order_by(ob.c.seq).limit(1)).first()
    if row is None:
        return None
    return row.seq, [int(i) for i in row.ids.split(",")]


def record_batch(conn: Connection, operation_id: int, owner: str, seq: int, looked_at: int,
                 changed: int, lease_seconds: float, now: datetime) -> bool:
    """Batch `seq` of `owner`'s operation is applied: add to the counts, renew the lease,
    delete the batch, and finish the operation when no batch is left. All of it in the
    caller's transaction, with the batch's row changes.

    The fence is here, at the end, so that the operation's row is locked only for the
    commit, not while the batch waits for row locks (a start of the same selection would
    wait for it).

    Returns:
        False when `owner` no longer holds the operation (it was taken over): nothing was
        written here, and the caller must roll back its batch.
    """
    result = conn.execute(op.update().where(
        op.c.id == operation_id, op.c.owner == owner, op.c.status == "running").values(
        done_rows=op.c.done_rows + looked_at, changed_rows=op.c.changed_rows + changed,
        lease_until=db_now(conn, lease_seconds), updated_at=now))
    if result.rowcount != 1:
        return False
    conn.execute(ob.delete().where(ob.c.operation_id == operation_id, ob.c.seq == seq))
    if next_batch(conn, operation_id) is None:
        finish(conn, operation_id, now, owner=owner)
    return True


def finish(conn: Connection, operation_id: int, now: datetime, error: str | None = None,
           owner: str | None = None) -> bool:
    """End running operation `operation_id` (held by `owner`, if given): `done`, or
    `failed` with `error`. The selection is free again; batches left over are deleted.

    Returns:
        False when it was not running (or not held by `owner`): nothing changed.
    """
    cond = [op.c.id == operation_id, op.c.status == "running"]
    if owner is not None:
        cond.append(op.c.owner == owner)
    result = conn.execute(op.update().where(*cond).values(
        status="failed" if error else "done", error=error, running_key=None, owner=None,
        lease_until=None, finished_at=now, updated_at=now))
    if result.rowcount == 1:
        conn.execute(ob.delete().where(ob.c.operation_id == operation_id))
    return result.rowcount == 1


def release(conn: Connection, operation_id: int, owner: str, now: datetime) -> bool:
    """End the lease of `owner` at once (a runner that stops before the end, e.g. on Ctrl-C):
    the operation is stalled now, and the next start of its selection resumes it."""
    result = conn.execute(op.update().where(
        op.c.id == operation_id, op.c.owner == owner, op.c.status == "running").values(
        lease_until=db_now(conn, -1), updated_at=now))
    return result.rowcount == 1


def take_over(conn: Connection, owner: str, lease_seconds: float, now: datetime, *,
              running_key: str | None = None, operation_id: int | None = None) -> int | None:
    """Give a running operation (of selection hash `running_key`, or `operation_id`) to
    `owner` if its lease ran out (its runner died or hangs): a compare-and-set on the
    lease, judged by the database's clock. A live runner renews before its lease ends, so
    it is never taken; of two takers, one wins.

    Returns:
        The operation's id when `owner` took it, else None.
    """
    cond = op.c.running_key == running_key if operation_id is None else op.c.id == operation_id
    result = conn.execute(op.update().where(
        cond, op.c.status == "running", op.c.lease_until < db_now(conn)).values(
        owner=owner, lease_until=db_now(conn, lease_seconds), updated_at=now))
    if result.rowcount != 1:
        return None
    return conn.execute(select(op.c.id).where(cond, op.c.owner == owner)).scalar()


def get_operation(conn: Connection, operation_id: int) -> dict | None:
    """Operation `operation_id` as a dict (`OPERATION_COLUMNS` plus `stalled`: running with
    its lease run out, on the database's clock), or None."""
    rows = _read(conn, op.c.id == operation_id)
    return rows[0] if rows else None


def running_operation(conn: Connection, running_key: str) -> dict | None:
    """The running operation of the selection whose hash is `running_key`, or None."""
    rows = _read(conn, op.c.running_key == running_key)
    return rows[0] if rows else None


def recent_operations(conn: Connection, limit: int = 10) -> list[dict]:
    """The newest `limit` operations, newest first (a range of the primary key)."""
    return _read(conn, None, limit=limit)


def _read(conn: Connection, cond, limit: int = 1) -> list[dict]:
    stalled = case(((op.c.status == "running") & (op.c.lease_until < db_now(conn)), 1), else_=0)
    stmt = (select(*(op.c[c] for c in OPERATION_COLUMNS), stalled.label("stalled"))
            .order_by(op.c.id.desc()).limit(limit))
    if cond is not None:
        stmt = stmt.where(cond)
    return [dict(r, stalled=bool(r["stalled"])) for r in conn.execute(stmt).mappings()]
