"""The Tasks framework's public names, from Django 6 (`django.tasks`) or, on Django 5.2,
from the `django-tasks` backport (`django_tasks`): one code path for both."""

from __future__ import annotations

try:  # Django >= 6.0
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks import exceptions as _exceptions
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.signals import task_enqueued
except ImportError:  # Django 5.2 with the backport
    from django_tasks import (  # type: ignore[no-redef]
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django_tasks import exceptions as _exceptions  # type: ignore[no-redef]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
    from django_tasks.base import TaskError  # type: ignore[no-redef]
    from django_tasks.signals import task_enqueued  # type: ignore[no-redef]

# Django 6 says InvalidTask, the backport InvalidTaskError.
InvalidTask = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
TaskResultDoesNotExist = _exceptions.TaskResultDoesNotExist

__all__ = ["BaseTaskBackend", "InvalidTask", "TaskContext", "TaskError", "TaskResult",
           "TaskResultDoesNotExist", "TaskResultStatus", "task_backends", "task_enqueued"]
