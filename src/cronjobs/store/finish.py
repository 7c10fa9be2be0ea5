"""The end of a run: write its outcome (one row or many), or delete a cancelled row.

Every write is fenced: only a row still `running` under the run's attempt is changed, so
a run whose lease was taken away (`rescue_stale`) and a newer run started cannot
overwrite the newer run. A batch (`finish_many`) is one UPDATE fenced row by row; when a
run of it lost its row, the batch is rolled back and written one by one. `finish_job` and
`finish_many` run once per job and are driver SQL (see `store.claim` for why);
`delete_job`, for the rarer cancel, is Core.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Connection, String, select
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from ..errors import OutcomesFenced
from .jobs import count_children
from .models import cronjob_queue as q
from .sql import bind, name, ph, unindexed

TABLE = q.name
_MISSING = object()


def finish_job(conn: Connection, job_id: int, attempt: int, values: dict) -> bool:
    """Write the outcome of run number `attempt` of row `job_id`, if that run still holds
    the row (`running`, same attempt).

    Args:
        values: column values; texts already within their limits (`cronjobs.limits`),
            `process_logs` the whole bounded log, times naive UTC.

    Returns:
        True when the row was updated.
    """
    dialect = name(conn)
    params = {f"v_{k}": bind(dialect, v) for k, v in values.items()}
    params.update(job_id=job_id, attempt=attempt)
    return conn.exec_driver_sql(finish_sql(dialect, tuple(values)), params).rowcount == 1


def finish_many(conn: Connection, items: list[tuple[int, int, dict]]) -> set[int]:
    """Write many outcomes with one UPDATE, each row fenced as in `finish_job` (`running`,
    under its run's attempt). `items` are `(job_id, attempt, values)`, one per row; a
    column that some rows do not set keeps those rows' value.

    On PostgreSQL the values travel as one array per column (`unnest`): the statement's
    text depends only on the columns, so psycopg parses it once and the server prepares
    it. Elsewhere it is a `CASE id` per column, and a column every row sets to the same
    value (the status, NULLs) is one parameter.

    Returns:
        The ids written: every id of `items`.

    Raises:
        OutcomesFenced: a run no longer held its row (its lease was taken back): the
            UPDATE took fewer rows than `items`, some of them written. Roll the
            transaction back and write the outcomes one by one (`finish_job`), which
            tells the lost run apart; what a lost run would write is never written.
    """
    if not items:
        return set()
    dialect = name(conn)
    columns = sorted({c for _, _, values in items for c in values})
    if dialect == "postgresql":
        sql, params = _unnest_update(conn, items, columns)
    else:
        sql, params = _case_update(dialect, items, columns)
    taken = conn.exec_driver_sql(sql, params).rowcount
    if taken != len(items):
        ids = ", ".join(str(int(job_id)) for job_id, _, _ in items)
        raise OutcomesFenced(f"{len(items) - taken} of {len(items)} runs no longer hold "
                             f"their rows (ids {ids})")
    return {job_id for job_id, _, _ in items}


def _case_update(dialect: str, items: list[tuple[int, int, dict]],
                 columns: list[str]) -> tuple[str, dict[str, Any]]:
    """The batch as one UPDATE of a `CASE id` per column (MySQL, MariaDB, SQLite)."""
    p = functools.partial(ph, dialect)
    params: dict[str, Any] = {}
    sets = []
    for column in columns:
        if _same_everywhere(items, column):
            params[f"v_{column}"] = bind(dialect, items[0][2][column])
            sets.append(f"{column} = {p(f'v_{column}')}")
            continue
        whens = []
        for n, (job_id, _, values) in enumerate(items):
            if column in values:
                params[f"v{n}_{column}"] = bind(dialect, values[column])
                whens.append(f"WHEN {int(job_id)} THEN {p(f'v{n}_{column}')}")
        sets.append(f"{column} = CASE id {' '.join(whens)} ELSE {column} END")
    ids = ", ".join(str(int(job_id)) for job_id, _, _ in items)
    runs = " ".join(f"WHEN {int(job_id)} THEN {int(attempt)}" for job_id, attempt, _ in items)
    return (f"UPDATE {TABLE} SET {', '.join(sets)} WHERE id IN ({ids}) AND status = 'running' "
            f"AND attempts = CASE id {runs} END"), params


def _same_everywhere(items: list[tuple[int, int, dict]], column: str) -> bool:
    """Every row sets `column`, all to one value (of one type: 1 is not True)."""
    first = items[0][2].get(column, _MISSING)
    return first is not _MISSING and all(
        column in values and type(values[column]) is type(first) and values[column] == first
        for _, _, values in items)


def _unnest_update(conn: Connection, items: list[tuple[int, int, dict]],
                   columns: list[str]) -> tuple[str, dict[str, Any]]:
    """The batch as one UPDATE from `unnest` of one array per column (PostgreSQL); a
    column some rows leave out comes with an array of flags saying which rows set it."""
    partial = tuple(c for c in columns if any(c not in values for _, _, values in items))
    params: dict[str, Any] = {"ids": [int(job_id) for job_id, _, _ in items],
                              "runs": [int(attempt) for _, attempt, _ in items]}
    for column in columns:
        params[f"a_{column}"] = [values.get(column) for _, _, values in items]
    for column in partial:
        params[f"s_{column}"] = [column in values for _, _, values in items]
    return _unnest_sql(conn.dialect, tuple(columns), partial), params


@functools.lru_cache(maxsize=64)
def _unnest_sql(dialect: Dialect, columns: tuple[str, ...], partial: tuple[str, ...]) -> str:
    # A text column's array is `text[]`, not `VARCHAR(n)[]`: an explicit cast would cut
    # an over-long value silently; the assignment to the column refuses it, as
    # `finish_job` does (the batch then falls back to one outcome at a time).
    arrays = [f"%(a_{c})s::{_array_type(q.c[c].type, dialect)}[]" for c in columns]
    arrays += [f"%(s_{c})s::boolean[]" for c in partial]
    sets = [f"{c} = CASE WHEN v.s_{c} THEN v.{c} ELSE q.{c} END" if c in partial
            else f"{c} = v.{c}" for c in columns]
    names = ", ".join([*columns, *(f"s_{c}" for c in partial)])
    return (f"UPDATE {TABLE} AS q SET {', '.join(sets)} FROM unnest(%(ids)s::bigint[], "
            f"%(runs)s::integer[], {', '.join(arrays)}) AS v(id, run, {names}) "
            f"WHERE q.id = v.id AND {unindexed('q.status')} = 'running' AND q.attempts = v.run")


def _array_type(column_type: TypeEngine, dialect: Dialect) -> str:
    """The element type of a column's array in `_unnest_sql`."""
    return "text" if isinstance(column_type, String) else column_type.compile(dialect=dialect)


def delete_job(conn: Connection, job_id: int, attempt: int | None = None) -> bool:
    """Delete row `job_id` if it has no children (a cancelled row). True when deleted.

    With `attempt`, only while that run still holds it (`running`, same attempt). The row
    is locked first, so a child inserted meanwhile (its foreign-key check waits for our
    lock) is seen, and the row is kept: a delete never cascades to live rows.
    """
    stmt = select(q.c.id).where(q.c.id == job_id)
    if attempt is not None:
        stmt = stmt.where(q.c.status == "running", q.c.attempts == attempt)
    if name(conn) != "sqlite":
        stmt = stmt.with_for_update()
    if conn.execute(stmt).first() is None or count_children(conn, job_id):
        return False
    return conn.execute(q.delete().where(q.c.id == job_id)).rowcount == 1


@functools.lru_cache(maxsize=64)
def finish_sql(dialect: str, columns: tuple[str, ...]) -> str:
    """The fenced UPDATE of one outcome (driver SQL of `dialect`) setting `columns`."""
    p = functools.partial(ph, dialect)
    sets = ", ".join(f"{c} = {p('v_' + c)}" for c in columns)
    return (f"UPDATE {TABLE} SET {sets} WHERE id = {p('job_id')} AND status = 'running' "
            f"AND attempts = {p('attempt')}")
