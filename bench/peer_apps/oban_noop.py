"""Oban-py's no-op worker (`bench.peer_apps.oban_noop.Noop`, an `async def` like the
other peers') and the set-up of a database for it: schema, then jobs with `enqueue_many`.

The worker process is Oban's own CLI: `python -m oban start --dsn DSN --queues default:8`.
"""

from __future__ import annotations

from oban import Oban, __version__, worker
from oban.schema import install
from psycopg_pool import AsyncConnectionPool

VERSION = __version__


@worker(queue="default")
class Noop:
    """Does nothing, so the queue's own cost is what is measured."""

    async def process(self, job):
        return None


async def setup(dsn: str, jobs: int, batch: int = 1000) -> None:
    """Install Oban's schema in the database of `dsn` and insert `jobs` no-op jobs.

    Args:
        dsn: a libpq connection string or URL (`postgresql://user@host:port/db`).
        jobs: how many jobs to insert (`Oban.enqueue_many`, `batch` per call).
    """
    pool = AsyncConnectionPool(dsn, min_size=1, max_size=1, open=False)
    await pool.open()
    try:
        await install(pool)
        oban = Oban(pool=pool)  # client mode: no queues, no leadership
        for start in range(0, jobs, batch):
            await oban.enqueue_many([Noop.new({}) for _ in range(min(batch, jobs - start))])
    finally:
        await pool.close()
