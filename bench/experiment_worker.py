"""Experiment launcher: `cronjobs worker` with a pool size set from outside the engine,
to measure a recommendation of docs/performance.md before the engine adopts it.

Usage: python -m bench.experiment_worker POOL_SIZE WORKER_ARGS...
SQLAlchemy's `create_engine`, as `cronjobs.db.make_engine` calls it for a server
database, gets `pool_size=POOL_SIZE, max_overflow=POOL_SIZE`; everything else is the
ordinary `cronjobs worker`. No engine file is changed.
"""

import functools
import sys

import sqlalchemy

import cronjobs.db as db
from cronjobs.cli import main


def _create_engine(size: int, url, **kwargs):
    if "poolclass" not in kwargs:  # SQLite's NullPool takes no size
        kwargs.update(pool_size=size, max_overflow=size)
    return sqlalchemy.create_engine(url, **kwargs)


if __name__ == "__main__":
    db.create_engine = functools.partial(_create_engine, int(sys.argv[1]))
    sys.argv = ["cronjobs", *sys.argv[2:]]
    main()
