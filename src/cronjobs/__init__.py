"""cronjobs: scheduled and background jobs from a database table.

Public API: `CronJobHandler`, `RetryLater`, `Job`, the `queue` module (`dispatch`,
`submit`, `dispatch_many`, `get`, `process`, `recover_stale`, `cleanup`) and
`scheduler.tick`. Nothing is connected at import time.
"""

from .errors import CronjobsError
from .handler import CronJobHandler, Job, RetryLater

__version__ = "0.1.0"
__all__ = ["CronJobHandler", "CronjobsError", "Job", "RetryLater", "__version__"]
