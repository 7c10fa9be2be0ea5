"""The Django app `cronjobs.contrib.django` (add it to `INSTALLED_APPS`)."""

from __future__ import annotations

from django.apps import AppConfig


class CronjobsConfig(AppConfig):
    """Registers the `django.task.execute` handler with cronjobs (so the site's processes — the
    web process that enqueues, `manage.py cronjobs worker` — know the type) and brings
    `manage.py cronjobs` and the read-only admin of the rows."""

    name = "cronjobs.contrib.django"
    label = "cronjobs"
    verbose_name = "cronjobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register `handler.DjangoTask` in cronjobs' default registry (seen by every
        App of the process)."""
        import registry

        from .handler import DjangoTask

        registry.register(DjangoTask.TYPE, DjangoTask)  # again: harmless
