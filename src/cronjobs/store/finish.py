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

from sqlalchemy import Connection, select

from ..errors import OutcomesFenced
from ..models import cronjob_queue as q
from .jobs import count_children
from .sql import bind, name, ph

TABLE = q.name


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
    """Write many outcomes with one UPDATE: a `CASE id` per column, each row fenced as in
    `finish_job` (`running`, under its run's attempt). `items` are `(job_id, attempt,
    values)`, one per row.

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
    p = functools.partial(ph, dialect)
    params: dict[str, Any] = {}
    columns = sorted({c for _, _, values in items for c in values})
    sets = []
    for column in columns:
        whens = []
        for n, (job_id, _, values) in enumerate(items):
            if column in values:
                params[f"v{n}_{column}"] = bind(dialect, values[column])
                whens.append(f"WHEN {int(job_id)} THEN {p(f'v{n}_{column}')}")
        sets.append(f"{column} = CASE id {' '.join(whens)} ELSE {column} END")
    ids = ", ".join(str(int(job_id)) for job_id, _, _ in items)
    runs = " ".join(f"WHEN {int(job_id)} THEN {int(attempt)}" for job_id, attempt, _ in items)
    taken = conn.exec_driver_sql(
        f"UPDATE {TABLE} SET {', '.join(sets)} WHERE id IN ({ids}) AND status = 'running' "
        f"AND attempts = CASE id {runs} END", params).rowcount
    if taken != len(items):
        raise OutcomesFenced(f"{len(items) - taken} of {len(items)} runs no longer hold "
                             f"their rows (ids {ids})")
    return {job_id for job_id, _, _ in items}


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
