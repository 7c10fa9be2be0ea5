"""cronjobs: scheduled and background jobs from a database table.

Public API: `CronJobHandler`, `RetryLater`, `Job`, the `queue` module (`dispatch`,
`submit`, `dispatch_many`, `get`, `process`, `recover_stale`, `cleanup`) and
`scheduler.tick`. Nothing is connected at import time.

`CronJobHandler`, `RetryLater` and `Job` are imported from `cronjobs.handler` on first
use (lazy: CLI start-up time: `cronjobs --help` and the commands that need no handler
class do not pay for the handler module and what it imports).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import CronjobsError

if TYPE_CHECKING:
    from .handler import CronJobHandler, Job, RetryLater

__version__ = "0.1.0"
__all__ = ["CronJobHandler", "CronjobsError", "Job", "RetryLater", "__version__"]

_FROM_HANDLER = frozenset({"CronJobHandler", "Job", "RetryLater"})


def __getattr__(name: str) -> Any:
    """`cronjobs.CronJobHandler`, `Job`, `RetryLater`: from `cronjobs.handler`, on first use."""
    if name in _FROM_HANDLER:
        from . import handler  # lazy: CLI start-up time

        value = getattr(handler, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cronjobs' has no attribute {name!r}")
