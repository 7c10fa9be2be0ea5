"""Lease renewal: the running rows' leases extended from the database's clock, fenced by
status and attempt (driver SQL, on the worker's housekeeping thread)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection

from .models import cronjob_queue as q
from .sql import lease_sql, lease_value, name, ph

TABLE = q.name


def renew_leases(conn: Connection, leases: Iterable[tuple[int, int, float]]) -> int:
    """Extend the leases of running rows: `(id, attempt, lease_seconds)` triples; each
    lease then ends `lease_seconds` after the database's clock now. One UPDATE per lease
    length, fenced by status and attempt (a run whose row was taken back renews nothing).

    Returns:
        How many rows were still held by those runs and got the new lease.
    """
    dialect = name(conn)
    groups: dict[float, list[tuple[int, int]]] = {}
    for job_id, attempt, lease in leases:
        groups.setdefault(float(lease), []).append((int(job_id), int(attempt)))
    renewed = 0
    for lease, runs in groups.items():
        renewed += conn.exec_driver_sql(renew_sql(dialect, tuple(runs)), {
            "lease": lease_value(dialect, lease)}).rowcount
    return renewed


def renew_sql(dialect: str, runs: tuple[tuple[int, int], ...]) -> str:
    held = " OR ".join(f"(id = {job_id} AND attempts = {attempt})" for job_id, attempt in runs)
    return (f"UPDATE {TABLE} SET locked_until = {lease_sql(dialect, ph(dialect, 'lease'))} "
            f"WHERE status = 'running' AND ({held})")
