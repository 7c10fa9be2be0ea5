"""cronjobs: scheduled and background jobs from a database table.

Public API: `CronJobHandler`, `RetryLater`, `Job`, the `queue` module (`dispatch`,
`submit`, `dispatch_many`, `get`, `process`, `recover_stale`, `cleanup`) and
`scheduler.tick`, and `health_check` (a decorator: a health check of your own, from
`cronjobs.health.custom`), and `handler` (a decorator: `@cronjobs.handler(TYPE, ...)`
makes a function a handler; the module `cronjobs.handler`, callable). Nothing is
connected at import time.

`CronJobHandler`, `RetryLater` and `Job` are imported from `cronjobs.handler` on first
use (lazy: CLI start-up time: `cronjobs --help` and the commands that need no handler
class do not pay for the handler module and what it imports).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import CronjobsError

if TYPE_CHECKING:
    from . import handler
    from .handler import CronJobHandler, Job, RetryLater
    from .health.custom import health_check

__version__ = "0.1.0"
__all__ = ["CronJobHandler", "CronjobsError", "Job", "RetryLater", "__version__", "health_check"]

__all__ += ["handler"]  # `@cronjobs.handler(TYPE, ...)`: a function as a handler

_FROM_HANDLER = frozenset({"CronJobHandler", "Job", "RetryLater"})


def __getattr__(name: str) -> Any:
    """`cronjobs.CronJobHandler`, `Job`, `RetryLater`: from `cronjobs.handler`, on first use."""
    if name in _FROM_HANDLER:
        from . import handler  # lazy: CLI start-up time

        value = getattr(handler, name)
        globals()[name] = value
        return value
    if name == "health_check":
        from .health import custom  # lazy: `import cronjobs` stays cheap

        globals()[name] = custom.health_check
        return custom.health_check
    if name == "handler":  # the module cronjobs.handler, callable: the decorator
        # lazy: CLI start-up time (not `from . import handler`: that asks this hook again)
        return importlib.import_module(f"{__name__}.handler")
    raise AttributeError(f"module 'cronjobs' has no attribute {name!r}")
