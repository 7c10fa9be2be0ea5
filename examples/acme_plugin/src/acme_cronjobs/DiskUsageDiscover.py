"""Disk usage, discover stage: one execute job per configured folder, hourly."""

from __future__ import annotations

from cronjobs import CronJobHandler
from cronjobs.summary import summary_table


class DiskUsageDiscover(CronJobHandler):
    """Dispatches one `acme.diskusage.execute` per folder of `ACME_DISKUSAGE_PATHS`.

    The idempotency key carries the folder and the slot, so a repeated discover of the same
    hour adds nothing. Result: `{"dispatched": n, "paths": [...], "jobs": [...]}`.
    """

    TYPE = "acme.diskusage.discover"
    FREQUENCY = "@hourly"
    MAX_ATTEMPTS = 3
    MAX_RUNTIME = 60

    @classmethod
    def available(cls) -> bool:
        """The plugin is usable on a system once it knows which folders to watch."""
        from acme_cronjobs import configured_paths

        return bool(configured_paths())

    def handle(self, payload, job):
        from acme_cronjobs import configured_paths

        paths = configured_paths()
        if not paths:
            return {"success": True, "status": "cancelled", "result": {"reason": "no-targets"}}
        slot = payload.get("slot") or f"manual-{job.id}"
        jobs = [self.dispatch("acme.diskusage.execute", {"path": path},
                              idempotency_key=f"acme.diskusage:{path}:{slot}"[:191],
                              title=f"disk usage {path}"[:255])
                for path in paths]
        return {"success": True, "result": {"dispatched": len(jobs), "paths": paths, "jobs": jobs}}

    @staticmethod
    def render_summary(result):
        from acme_cronjobs import LABELS

        return summary_table([(LABELS.gettext("Folders"), result.get("paths")),
                              (LABELS.gettext("Jobs dispatched"), result.get("dispatched"))])
