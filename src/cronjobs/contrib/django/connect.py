"""The cronjobs side of a Django site: its database URL and its App.

The cronjobs database is the database of Django's `default` connection, unless the
cronjobs settings name another: `CRONJOBS_DATABASE_URL` in the environment, or
`CRONJOBS_DATABASE_URL` / `CRONJOBS_DATABASE` (a `DATABASES` alias) in Django's settings.
"""

from __future__ import annotations

import os
import threading

from django.conf import settings
from django.db import connections

from ...app import App
from ...config import Settings
from ...errors import CronjobsError
from ...store import borrowed

_apps: dict[str, App] = {}
_lock = threading.Lock()


def alias() -> str:
    """The `DATABASES` alias cronjobs uses (`CRONJOBS_DATABASE` in Django's settings, default
    "default")."""
    return getattr(settings, "CRONJOBS_DATABASE", "default")


def database_url(name: str | None = None) -> str:
    """The SQLAlchemy URL of Django's `DATABASES[name]` (default `alias()`), as the
    connection sees it now (a test run's test database included).

    Raises:
        CronjobsError: the alias is unknown, or its ENGINE is not SQLite, PostgreSQL or
            MySQL/MariaDB.
    """
    name = name or alias()
    if name not in connections:
        raise CronjobsError(f"CRONJOBS_DATABASE names no entry of DATABASES: {name!r}")
    entry = connections[name].settings_dict
    url = borrowed.django_url(entry)
    if url is None:
        raise CronjobsError(f"cronjobs cannot use the Django database engine "
                            f"{entry.get('ENGINE')!r} (DATABASES[{name!r}]); use SQLite, "
                            f"PostgreSQL or MySQL/MariaDB, or set CRONJOBS_DATABASE_URL")
    return url


def cronjobs_database_url() -> str:
    """The cronjobs database: `CRONJOBS_DATABASE_URL` (environment, then Django's
    settings), else `database_url()`."""
    return (os.environ.get("CRONJOBS_DATABASE_URL")
            or getattr(settings, "CRONJOBS_DATABASE_URL", None) or database_url())


def get_app() -> App:
    """The cronjobs App of this Django process (settings from the environment as
    `cronjobs` reads them, with the database of `cronjobs_database_url()`); one per URL,
    so a test run's database gets an App of its own."""
    url = cronjobs_database_url()
    with _lock:
        app = _apps.get(url)
        if app is None:
            app = _apps[url] = App(Settings.load(database_url=url))
        return app
