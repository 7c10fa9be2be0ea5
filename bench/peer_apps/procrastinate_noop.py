"""Procrastinate's app with a no-op task (`async def`, like the other peers') and the
set-up of a database for it: schema with `apply_schema_async`, jobs with
`batch_defer_async`.

The worker process is Procrastinate's own CLI:
`python -m procrastinate --app bench.peer_apps.procrastinate_noop.app worker --queues
default --concurrency 8`, with the database in `BENCH_PEER_DSN`.
"""

from __future__ import annotations

import os

import procrastinate

VERSION = procrastinate.__version__

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("BENCH_PEER_DSN", "")))


@app.task(name="noop", queue="default")
async def noop() -> None:
    """Does nothing, so the queue's own cost is what is measured."""


async def setup(dsn: str, jobs: int, batch: int = 1000) -> None:
    """Apply Procrastinate's schema to the database of `dsn` and defer `jobs` no-op jobs.

    Args:
        dsn: a libpq connection string or URL (`postgresql://user@host:port/db`).
        jobs: how many jobs to insert (`batch_defer_async`, `batch` per call).
    """
    with app.replace_connector(procrastinate.PsycopgConnector(conninfo=dsn)):
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            for start in range(0, jobs, batch):
                await noop.batch_defer_async(*({} for _ in range(min(batch, jobs - start))))
