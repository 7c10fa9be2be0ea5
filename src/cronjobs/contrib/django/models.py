"""`Job`: an unmanaged, read-only model over `cronjob_queue` (cronjobs' migrations own
the table: `manage.py cronjobs migrate`), for the admin and the site's own queries."""

from __future__ import annotations

from django.db import models

from ...store.models import cronjob_queue


class Job(models.Model):
    """One row of `cronjob_queue` (times in UTC). Read-only: write rows with
    `cronjobs.queue.dispatch` or a task's `enqueue()`."""

    id = models.BigAutoField(primary_key=True)
    type = models.CharField(max_length=191)
    queue = models.CharField(max_length=191)
    status = models.CharField(max_length=16)
    priority = models.IntegerField()
    title = models.CharField(max_length=255, null=True)
    payload = models.TextField(null=True)
    result_payload = models.TextField(null=True)
    error = models.TextField(null=True)
    traceback = models.TextField(null=True)
    process_logs = models.TextField(null=True)
    attempts = models.IntegerField()
    max_attempts = models.IntegerField(null=True)
    worker_id = models.CharField(max_length=191, null=True)
    parent_id = models.BigIntegerField(null=True)
    scheduled_at = models.DateTimeField(null=True)
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = cronjob_queue.name
        ordering = ["-id"]
        verbose_name = "job"

    def __str__(self) -> str:
        return f"#{self.id} {self.type} ({self.status})"
