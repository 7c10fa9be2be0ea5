"""acme-cronjobs: an example cronjobs plugin (disk usage of configured folders).

cronjobs finds it through the entry point `acme = "acme_cronjobs:register_handlers"` in the
group `cronjobs.handlers` (see pyproject.toml).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from cronjobs.i18n import Catalog

from .DiskUsageDiscover import DiskUsageDiscover
from .DiskUsageExecute import DiskUsageExecute

# The plugin's own labels: translations/<locale>/LC_MESSAGES/acme.po
LABELS = Catalog(Path(__file__).parent / "translations", "acme")

__all__ = ["DiskUsageDiscover", "DiskUsageExecute", "LABELS", "configured_paths",
           "register_handlers"]


def configured_paths() -> list[str]:
    """The folders to measure: `ACME_DISKUSAGE_PATHS`, separated by `os.pathsep`."""
    return [p for p in os.environ.get("ACME_DISKUSAGE_PATHS", "").split(os.pathsep) if p]


def register_handlers(register: Callable[[str, type], None]) -> None:
    """Entry point: register the plugin's handler classes with cronjobs."""
    for cls in (DiskUsageDiscover, DiskUsageExecute):
        register(cls.TYPE, cls)
