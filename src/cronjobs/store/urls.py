"""The database URLs cronjobs accepts (its hot path is driver SQL for PyMySQL, psycopg 3
and sqlite3), and what to write instead of the URLs hosting services print."""

from __future__ import annotations

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["DATABASE_SCHEME_FOR", "SUPPORTED_DATABASE_SCHEMES", "check_database_url"]

SUPPORTED_DATABASE_SCHEMES = frozenset({"sqlite", "sqlite+pysqlite", "mysql+pymysql",
                                        "mariadb+pymysql", "postgresql+psycopg"})
DATABASE_SCHEME_FOR = {"postgres": "postgresql+psycopg", "postgresql": "postgresql+psycopg",
                       "mysql": "mysql+pymysql", "mariadb": "mariadb+pymysql",
                       "sqlite": "sqlite"}


def check_database_url(value: str) -> str:
    """`value` when it is a SQLAlchemy URL of a database and driver cronjobs speaks.

    Raises:
        ValueError: not a URL; a SQLite URL with a host; another database; a known
            database with another driver (the message gives the URL to write instead).
    """
    try:
        url = make_url(value)
    except ArgumentError:
        raise ValueError(f"not a database URL: {value!r} (e.g. sqlite:///cronjobs.db, "
                         f"mysql+pymysql://user:pw@host/db)") from None
    scheme = url.drivername
    if scheme.startswith("sqlite") and (url.host or url.port):
        raise ValueError(f"SQLite URL {value!r} names a host: write sqlite:///file.db for a "
                         f"file in the working folder, sqlite:////abs/path.db for an "
                         f"absolute path")
    if scheme in SUPPORTED_DATABASE_SCHEMES:
        return value
    backend = scheme.split("+")[0]
    use = DATABASE_SCHEME_FOR.get(backend)
    if use is None:
        raise ValueError(f"unsupported database {scheme!r} in {url!r}: use sqlite:///..., "
                         f"mysql+pymysql://... or postgresql+psycopg://...")
    raise ValueError(f"database URL {url!r} names the driver {scheme!r}, which cronjobs "
                     f"does not use: write it as {url.set(drivername=use)!r}")
