"""The task list's public names: `task_infos`, `TaskInfo` and `set_enabled` (the kill
switch), docs/reference/api.md.

The code lives in `cronjobs.schedule.tasks`; this module keeps `from cronjobs.tasks import
task_infos` working.
"""

from .schedule.tasks import TaskInfo, set_enabled, task_infos, unknown_sections

__all__ = ["TaskInfo", "set_enabled", "task_infos", "unknown_sections"]
