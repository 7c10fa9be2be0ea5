"""The imports users write keep working after the code moved into packages
(docs/reference/api.md): the package's names, the queue, the scheduler's and the task
list's public faces, the testing helpers, the Results tab helpers."""

from __future__ import annotations

import importlib

import pytest

import cronjobs

PUBLIC = {
    "cronjobs": ["CronJobHandler", "RetryLater", "Job", "CronjobsError"],
    "cronjobs.handler": ["CronJobHandler", "RetryLater", "Job"],
    "cronjobs.queue": ["dispatch", "submit", "dispatch_many", "get", "process",
                       "recover_stale", "cleanup", "Dispatched"],
    "cronjobs.scheduler": ["tick", "TickReport", "task_infos", "TaskInfo", "set_enabled"],
    "cronjobs.tasks": ["task_infos", "TaskInfo", "set_enabled"],
    "cronjobs.testing": ["make_test_app", "drain", "FrozenClock"],
    "cronjobs.summary": ["summary_table"],
    "cronjobs.errors": ["CronjobsError", "ConfigError"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_is_where_the_docs_say(module):
    imported = importlib.import_module(module)
    assert [n for n in PUBLIC[module] if not hasattr(imported, n)] == []


def test_the_faces_are_the_code_itself():
    """`cronjobs.scheduler.tick` is `cronjobs.schedule.scheduler.tick`, not a copy."""
    from cronjobs.schedule import scheduler, tasks
    from cronjobs.scheduler import tick
    from cronjobs.tasks import TaskInfo, set_enabled, task_infos

    assert tick is scheduler.tick and TaskInfo is tasks.TaskInfo
    assert set_enabled is tasks.set_enabled and task_infos is tasks.task_infos
    assert cronjobs.CronJobHandler.__module__ == "cronjobs.handler"
