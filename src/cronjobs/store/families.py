"""A family's statements: the completion decision's reads and locks, its record, its counts.

A family is a root row (no parent) and every row whose `root_id` is the root. Whether it
has completed is decided in each transaction that finishes one of its rows
(`cronjobs.family.settle`), with three statements here, in this order:

1. `running_witness`: another running row of the family that no transaction holds, locked
   (`FOR UPDATE SKIP LOCKED`): its own finish waits for this transaction's commit, so it
   will see this transaction's rows finished. Found: the family goes on; done.
2. else `lock_root`: the root row locked (`FOR UPDATE`, waiting): the transactions that
   found no witness decide one after the other;
3. `unfinished`: a plain read (READ COMMITTED: everything committed so far). None left
   and the root finished: the family is complete (`record_completion`).

`running_witness` runs once per family per finishing batch, and not at all while the
finishing worker itself runs another row of the family (that row's end, written by the
same worker after this transaction, decides: `Executor.held_families`; not covered:
recover-stale taking that row from a worker still alive, which would have to stop
renewing its leases for `recover_stale_minutes` while it goes on committing); the root is
locked only by a batch whose family had no free running row left (its last rows, or a
moment when every running row was being finished), so finishing children do not queue
on the root.
SQLite has one writer at a time: the locks are left out and the plain read decides.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Connection, case, func, literal, select

from ..status import Status
from .dependencies import fetch_rows
from .models import cronjob_dependency as deps
from .models import cronjob_family as fam
from .models import cronjob_queue as q
from .sql import insert_ignore, lock_sql, name, ph

TABLE = q.name


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(str(int(i)) for i in ids)


def links(conn: Connection, parentless: Iterable[int],
          finished: Iterable[int]) -> tuple[set[int], list[tuple[int, int]]]:
    """What the end of rows may start, in one round trip (the finishing hot path): of
    `parentless` (finished rows without a parent), those that have a row under them (a
    family), and the `(job_id, depends_on_id)` of every row depending on one of
    `finished`. Sent on the driver's cursor with the ids written into its text.

    Returns:
        `(roots with children, dependency pairs)`.
    """
    roots = sorted({int(i) for i in parentless})
    done = sorted({int(i) for i in finished})
    parts = []
    for start in range(0, len(roots), 500):
        parts.append(f"SELECT 0, r.id, 0 FROM {TABLE} r WHERE r.id IN "
                     f"({_ids(roots[start:start + 500])}) AND EXISTS (SELECT 1 FROM {TABLE} c "
                     f"WHERE c.root_id = r.id)")
    for start in range(0, len(done), 500):
        parts.append(f"SELECT 1, job_id, depends_on_id FROM {deps.name} WHERE depends_on_id "
                     f"IN ({_ids(done[start:start + 500])})")
    if not parts:
        return set(), []
    parents: set[int] = set()
    pairs: list[tuple[int, int]] = []
    for kind, a, b in fetch_rows(conn, " UNION ALL ".join(parts)):
        if kind:
            pairs.append((int(a), int(b)))
        else:
            parents.add(int(a))
    return parents, pairs


def roots_with_children(conn: Connection, ids: Iterable[int]) -> set[int]:
    """Of row ids `ids` (parentless rows), those that have at least one row under them."""
    return links(conn, ids, ())[0]


def running_witness(conn: Connection, root_id: int, own: Iterable[int]) -> int | None:
    """A `running` row of family `root_id`, not in `own` (this transaction's rows) and not
    locked by another transaction, locked until this one ends; None when there is none.
    The newest is taken (likely still running its job, not in another worker's finishing
    batch, whose writes the lock would hold up); read in index order, so only that row is
    locked. On SQLite (one writer) any running row not in `own`."""
    dialect = name(conn)
    own_ids = _ids(own) or "0"
    sql = (f"SELECT id FROM {TABLE} WHERE root_id = {ph(dialect, 'root')} "
           f"AND status = 'running' AND id NOT IN ({own_ids}) "
           f"ORDER BY id DESC LIMIT 1{lock_sql(dialect, skip=True)}")
    row = conn.exec_driver_sql(sql, {"root": int(root_id)}).first()
    return None if row is None else int(row[0])


def lock_root(conn: Connection, root_id: int) -> dict | None:
    """Lock the root row (waiting for its holder) and return its `id`, `type`, `queue`,
    `status`, `payload`, `outcome_reason`, `finished_at`; None when it is gone."""
    dialect = name(conn)
    sql = (f"SELECT id, type, queue, status, payload, outcome_reason, finished_at FROM {TABLE} "
           f"WHERE id = {ph(dialect, 'root')}{lock_sql(dialect, skip=False)}")
    row = conn.exec_driver_sql(sql, {"root": int(root_id)}).mappings().first()
    return None if row is None else dict(row)


def unfinished(conn: Connection, root_id: int) -> bool:
    """True while a row of family `root_id` (not the root) is `pending`, `waiting` or
    `running` (a plain read: what is committed, and this transaction's own writes)."""
    dialect = name(conn)
    sql = (f"SELECT 1 FROM {TABLE} WHERE root_id = {ph(dialect, 'root')} "
           f"AND status IN ('pending', 'waiting', 'running') LIMIT 1")
    return conn.exec_driver_sql(sql, {"root": int(root_id)}).first() is not None


def counts(conn: Connection, root_id: int) -> list[tuple[str, str | None, int]]:
    """The rows under root `root_id` (not the root, not its callbacks) per status and
    outcome reason: `[(status, reason or None, rows)]`."""
    rows = conn.execute(select(q.c.status, q.c.outcome_reason, func.count())
                        .where(q.c.root_id == root_id)
                        .group_by(q.c.status, q.c.outcome_reason))
    return [(str(status), reason, int(n)) for status, reason, n in rows]


def last_generation(conn: Connection, root_id: int) -> int:
    """The generation of the family's last completion (0: never completed)."""
    value = conn.execute(select(func.max(fam.c.generation))
                         .where(fam.c.root_id == root_id)).scalar()
    return int(value or 0)


def record_completion(conn: Connection, root_id: int, generation: int, outcome: str,
                      status_counts: dict[str, int], now: datetime) -> bool:
    """Record completion number `generation` of family `root_id` (`outcome`: success,
    failure or cancelled; `status_counts`: status -> rows; `now` naive UTC). Returns False
    when that generation was recorded already (nothing written)."""
    stmt = insert_ignore(conn, fam, ["root_id", "generation"]).values(
        root_id=root_id, generation=generation, outcome=outcome,
        counts=json.dumps(status_counts, sort_keys=True), completed_at=now)
    # psycopg 3 drops an INSERT's rowcount (-1) unless SQLAlchemy is asked to keep it.
    return conn.execute(stmt.execution_options(preserve_rowcount=True)).rowcount == 1


def completions(conn: Connection, root_id: int) -> list[dict]:
    """Every recorded completion of family `root_id`, oldest first: `generation`,
    `outcome`, `counts` (decoded), `completed_at`."""
    rows = conn.execute(select(fam).where(fam.c.root_id == root_id)
                        .order_by(fam.c.generation)).mappings()
    return [dict(r, counts=json.loads(r["counts"])) for r in rows]


CALLBACK_KINDS = ("complete", "success", "failure")


def callback_key(root_id: int, generation: int, kind: str) -> str:
    """The idempotency key of callback `kind` of completion `generation` of a family:
    `family:<root>:<generation>:<kind>`."""
    return f"family:{int(root_id)}:{int(generation)}:{kind}"


def callback_keys(root_id: int, generations: int) -> list[str]:
    """The idempotency keys the callback rows of completions 1 to `generations` of family
    `root_id` may hold (`callback_key`)."""
    return [callback_key(root_id, g, kind) for g in range(1, generations + 1)
            for kind in CALLBACK_KINDS]


def callbacks(conn: Connection, root_id: int, generations: int | None = None) -> list[dict]:
    """The callback rows of family `root_id` (`parent_id` the root, key `family:...`):
    `id`, `type`, `status`, `idempotency_key`, `finished_at`, oldest first.

    Args:
        generations: the family's completions so far, when known: its callback rows are
            then read by their keys (the unique key index) instead of among the root's
            children (every row of the family)."""
    if generations is not None:
        keys = callback_keys(root_id, generations)
        if not keys:
            return []
        where = [q.c.idempotency_key.in_(keys)]
    else:
        where = [q.c.parent_id == root_id, q.c.root_id.is_(None),
                 q.c.idempotency_key.like(f"family:{int(root_id)}:%")]
    rows = conn.execute(select(q.c.id, q.c.type, q.c.status, q.c.idempotency_key,
                               q.c.finished_at).where(*where).order_by(q.c.id)).mappings()
    return [dict(r) for r in rows]


def root_row(conn: Connection, root_id: int) -> dict | None:
    """Row `root_id`'s `id`, `type`, `status`, `root_id`, `parent_id`, `created_at`,
    `started_at`, `finished_at`; None when it is gone."""
    row = conn.execute(select(q.c.id, q.c.type, q.c.status, q.c.root_id, q.c.parent_id,
                              q.c.created_at, q.c.started_at, q.c.finished_at)
                       .where(q.c.id == root_id)).mappings().first()
    return None if row is None else dict(row)


def ids_in(conn: Connection, root_id: int, status: str) -> list[int]:
    """The ids of the family's rows (the root and every row under it) in `status`,
    ascending."""
    stmt = (select(q.c.id).where((q.c.root_id == root_id) | (q.c.id == root_id),
                                 q.c.status == status).order_by(q.c.id))
    return [int(r[0]) for r in conn.execute(stmt)]


def mark_cancelled(conn: Connection, root_id: int, reason: str) -> None:
    """Note on a finished root row that its family was cancelled (`outcome_reason`,
    when it has none), so the family's completion says `cancelled`."""
    conn.execute(q.update().where(q.c.id == root_id, q.c.outcome_reason.is_(None),
                                  q.c.status.in_(("completed", "failed", "cancelled")))
                 .values(outcome_reason=reason))
# What the family page, `queue.family(id)`, `cronjobs family` and the task page read: each
# statement is one range of `ix_cronjob_queue_root_status` (root_id, status, id) or of
# `ix_cronjob_queue_parent`, and the per-root ones take the roots of a page in one go.

ERROR_KEY_CHARS = 200  # failed rows of one text are one group (as the Failed page's key)


def summary(conn: Connection, root_id: int, since: datetime | None = None) -> dict:
    """`counts` and `times` of family `root_id` in one pass over its rows:
    `{"counts": [(status, reason or None, rows)], "first_started_at", "last_finished_at",
    "finished_since"}` (`finished_since`: rows finished at or after `since`, 0 without
    it)."""
    return summaries_of(conn, [root_id], since).get(int(root_id)) or _empty()


def _empty() -> dict:
    return {"counts": [], "first_started_at": None, "last_finished_at": None,
            "finished_since": 0}


def summaries_of(conn: Connection, root_ids: Iterable[int],
                 since: datetime | None = None) -> dict[int, dict]:
    """`summary` of several roots at once (one grouped read of `(root_id, ...)`):
    `{root: summary}`, roots without rows under them left out."""
    ids = sorted({int(i) for i in root_ids})
    if not ids:
        return {}
    recent = (func.sum(case((q.c.finished_at >= since, 1), else_=0)) if since is not None
              else literal(0))
    root = q.c.root_id == ids[0] if len(ids) == 1 else q.c.root_id.in_(ids)
    stmt = (select(q.c.root_id, q.c.status, q.c.outcome_reason, func.count(),
                   func.min(q.c.started_at), func.max(q.c.finished_at), recent)
            .where(root).group_by(q.c.root_id, q.c.status, q.c.outcome_reason))
    found: dict[int, dict] = {}
    for root_id, status, reason, n, first, last, fresh in conn.execute(stmt):
        out = found.setdefault(int(root_id), _empty())
        out["counts"].append((str(status), reason, int(n)))
        if first is not None and (out["first_started_at"] is None
                                  or first < out["first_started_at"]):
            out["first_started_at"] = first
        if last is not None and (out["last_finished_at"] is None
                                 or last > out["last_finished_at"]):
            out["last_finished_at"] = last
        out["finished_since"] += int(fresh or 0)
    return found


def failed_rows(conn: Connection, root_id: int, limit: int) -> list[tuple]:
    """The newest `limit` failed rows under root `root_id` (a descending range of
    `ix_cronjob_queue_root_status`): `[(id, fingerprint, error's first 200 characters)]`,
    newest first; the caller groups them."""
    error = func.substr(func.coalesce(q.c.error, ""), 1, ERROR_KEY_CHARS)
    stmt = (select(q.c.id, q.c.fingerprint, error)
            .where(q.c.root_id == root_id, q.c.status == Status.FAILED)
            .order_by(q.c.id.desc()).limit(limit))
    return [(int(i), fp, text or "") for i, fp, text in conn.execute(stmt)]


def failed_reasons_of(conn: Connection, root_ids: Iterable[int]) -> dict[int, dict]:
    """The failed rows under each of `root_ids` per outcome reason (a range of
    `ix_cronjob_queue_root_status` over the failed rows only): `{root: {reason: rows}}`
    (rows without a reason left out)."""
    ids = sorted({int(i) for i in root_ids})
    if not ids:
        return {}
    stmt = (select(q.c.root_id, q.c.outcome_reason, func.count())
            .where(q.c.root_id.in_(ids), q.c.status == Status.FAILED,
                   q.c.outcome_reason.is_not(None))
            .group_by(q.c.root_id, q.c.outcome_reason))
    out: dict[int, dict] = {}
    for root, reason, n in conn.execute(stmt):
        out.setdefault(int(root), {})[reason] = int(n)
    return out


def roots_of(conn: Connection, ids: Iterable[int]) -> dict[int, dict]:
    """`{id: {id, type, status, root_id, parent_id, started_at, finished_at}}` of rows
    `ids` (primary key; missing ids are left out)."""
    ids = sorted({int(i) for i in ids})
    if not ids:
        return {}
    rows = conn.execute(select(q.c.id, q.c.type, q.c.status, q.c.root_id, q.c.parent_id,
                               q.c.started_at, q.c.finished_at)
                        .where(q.c.id.in_(ids))).mappings()
    return {int(r["id"]): dict(r) for r in rows}


def last_completions(conn: Connection, root_ids: Iterable[int]) -> dict[int, dict]:
    """The last recorded completion of each of `root_ids` (those completed at least once):
    `{root: {generation, outcome, counts, completed_at}}`."""
    ids = sorted({int(i) for i in root_ids})
    if not ids:
        return {}
    rows = conn.execute(select(fam).where(fam.c.root_id.in_(ids))
                        .order_by(fam.c.root_id, fam.c.generation)).mappings()
    return {int(r["root_id"]): dict(r, counts=json.loads(r["counts"])) for r in rows}


def callbacks_of(conn: Connection, generations: dict[int, int]) -> dict[int, list[dict]]:
    """`callbacks` of several roots at once, by their keys (`generations`: root ->
    completions so far): `{root: [{id, type, status, idempotency_key, finished_at}]}`
    (oldest first; roots without any are left out)."""
    keys = [k for root, n in generations.items() for k in callback_keys(root, n)]
    if not keys:
        return {}
    rows = conn.execute(select(q.c.id, q.c.parent_id, q.c.type, q.c.status,
                               q.c.idempotency_key, q.c.finished_at)
                        .where(q.c.idempotency_key.in_(keys))
                        .order_by(q.c.id)).mappings()
    out: dict[int, list[dict]] = {}
    for r in rows:
        row = dict(r)
        out.setdefault(int(row.pop("parent_id")), []).append(row)
    return out

