"""Disk usage, execute stage: count the files and bytes under one folder."""

from __future__ import annotations

import os

from cronjobs import CronJobHandler
from cronjobs.summary import summary_table


def measure(path: str) -> tuple[int, int]:
    """(files, bytes) under `path`, recursively; symbolic links are not followed."""
    files = size = 0
    stack = [path]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    files += 1
                    size += entry.stat(follow_symlinks=False).st_size
    return files, size


class DiskUsageExecute(CronJobHandler):
    """Measures `payload["path"]`. Fails (and so shows and alerts) above
    `ACME_DISKUSAGE_LIMIT_MB` megabytes, or when the folder cannot be read.
    Result: `{"path", "files", "bytes", "limit_bytes"}`."""

    TYPE = "acme.diskusage.execute"
    MAX_ATTEMPTS = 2
    MAX_RUNTIME = 300

    @classmethod
    def available(cls) -> bool:
        """Same precondition as the discover stage: folders are configured."""
        from acme_cronjobs import configured_paths

        return bool(configured_paths())

    def handle(self, payload, job):
        path = payload.get("path")
        if not path:
            self.error = "payload needs a path"
            return False
        limit_mb = os.environ.get("ACME_DISKUSAGE_LIMIT_MB")
        limit = int(float(limit_mb) * 1_000_000) if limit_mb else None
        try:
            files, size = measure(path)
        except OSError as exc:
            self.error = f"cannot read {path}: {exc.strerror or exc}"
            return False
        result = {"path": path, "files": files, "bytes": size, "limit_bytes": limit}
        if limit is not None and size > limit:
            return {"success": False, "result": result,
                    "error": f"{path} holds {size} bytes, over the limit of {limit}"}
        return {"success": True, "result": result}

    @staticmethod
    def render_summary(result):
        from acme_cronjobs import LABELS

        _ = LABELS.gettext
        return summary_table([(_("Folder"), result.get("path")),
                              (_("Files"), result.get("files")),
                              (_("Size (bytes)"), result.get("bytes")),
                              (_("Limit (bytes)"), result.get("limit_bytes"))])
