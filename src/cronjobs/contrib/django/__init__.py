"""cronjobs for Django sites (the `cronjobs[django]` extra; docs/django.md).

- `CronjobsBackend`: a backend of Django's Tasks framework (`django.tasks` on Django 6,
  the `django_tasks` backport on Django 5.2): `my_task.enqueue()` writes a
  `cronjob_queue` row through Django's own connection, in the caller's transaction.
- `python manage.py cronjobs <command>`: every cronjobs command with the site's database.
- a read-only admin of the rows.

Add `"cronjobs.contrib.django"` to `INSTALLED_APPS` and
`TASKS = {"default": {"BACKEND": "cronjobs.contrib.django.CronjobsBackend"}}`.
Importing this package imports nothing of Django: `CronjobsBackend` is loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CronjobsBackend"]


def __getattr__(name: str) -> Any:
    if name == "CronjobsBackend":
        from .backend import CronjobsBackend  # lazy: Django is set up by then

        return CronjobsBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
