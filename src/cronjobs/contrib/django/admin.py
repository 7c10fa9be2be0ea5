"""A read-only admin of `cronjob_queue` rows (list, filters, search, one row's page)."""

from __future__ import annotations

from django.contrib import admin

from .models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Rows listed newest first, filtered by status, queue and type; nothing editable
    (steer rows with the cronjobs dashboard or CLI)."""

    list_display = ("id", "type", "title", "queue", "status", "attempts", "created_at",
                    "finished_at")
    list_filter = ("status", "queue", "type")
    search_fields = ("=id", "type", "title")
    readonly_fields = [f.name for f in Job._meta.get_fields()]
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        """Rows are not added here."""
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        """Rows are not changed here (the page still shows them)."""
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        """Rows are not deleted here."""
        return False
