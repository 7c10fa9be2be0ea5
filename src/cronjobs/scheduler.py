"""The scheduler's public names: `tick` (start every due slot once) and `TickReport`, and
the task list's `task_infos`, `TaskInfo` and `set_enabled` (docs/reference/api.md).

The code lives in `cronjobs.schedule`; this module keeps `from cronjobs.scheduler import
tick` working.
"""

from .schedule.scheduler import TaskInfo, TickReport, set_enabled, task_infos, tick
from .schedule.service import run_forever

__all__ = ["TaskInfo", "TickReport", "run_forever", "set_enabled", "task_infos", "tick"]
