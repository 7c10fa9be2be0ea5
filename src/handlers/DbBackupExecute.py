"""Database backup: copy the system's own database to a folder, keep the newest N, daily."""

from __future__ import annotations

from pathlib import Path

from markupsafe import Markup

from cronjobs import CronJobHandler, Job
from cronjobs.i18n import gettext as _
from cronjobs.summary import summary_table


class DbBackupExecute(CronJobHandler):
    """Backs up the database of `CRONJOBS_DATABASE_URL` into `CRONJOBS_BACKUP_DIR` and
    deletes all but the newest `CRONJOBS_BACKUP_KEEP` backups of it.

    SQLite uses the online backup API; MySQL/MariaDB needs `mariadb-dump` or `mysqldump`,
    PostgreSQL `pg_dump` (`available()` is False without it: the task shows "module not
    installed" and is not scheduled). DESTRUCTIVE (it deletes old backups): the task ships
    disabled; enable it with `cronjobs tasks enable db-backup`. Payload (optional):
    `folder`, `keep` override the settings for one run. Result: `file`, `size_bytes`,
    `duration_ms`, `sha256`, `method`, `database`, `deleted` (file names), `kept`.
    """

    TYPE = "db.backup.execute"
    FREQUENCY = "day"
    DESTRUCTIVE = True
    MAX_ATTEMPTS = 2
    MAX_RUNTIME = 3600
    DISPATCH_SCOPE = "admin"  # POST /api/jobs needs an admin token (docs/api.md)
    QUEUE = "maintenance"

    @classmethod
    def available(cls) -> bool:
        """False when the dump program the configured database needs is not installed."""
        # lazy: CLI start-up time (the registry imports every handler module)
        from cronjobs.app import current
        from cronjobs.store.backup import can_back_up

        return can_back_up(current().settings.database_url)

    def handle(self, payload: dict, job: Job) -> dict | bool:
        """Make one backup and prune the old ones."""
        from cronjobs.store.backup import BackupError, backup_database  # lazy: as in available()

        folder = Path(payload.get("folder") or self.settings.backup.dir)
        keep = int(payload.get("keep") or self.settings.backup.keep)
        try:
            made = backup_database(self.settings.database_url, folder, keep, self.context.now())
        except (BackupError, OSError) as exc:
            self.error = f"backup failed: {exc}"
            return False
        return {"success": True, "result": {
            "file": made.file, "size_bytes": made.size_bytes, "duration_ms": made.duration_ms,
            "sha256": made.sha256, "method": made.method, "database": made.database,
            "deleted": made.deleted, "kept": keep}}

    @staticmethod
    def render_summary(result: dict) -> Markup:
        """File, size, duration, checksum and deleted backups (escaped, localized labels)."""
        return summary_table([
            (_("Database"), result.get("database")),
            (_("Method"), result.get("method")),
            (_("File"), result.get("file")),
            (_("Size (bytes)"), result.get("size_bytes")),
            (_("Duration (ms)"), result.get("duration_ms")),
            ("SHA-256", result.get("sha256")),
            (_("Old backups deleted"), result.get("deleted") or "-"),
            (_("Reason"), result.get("reason")),
        ])
