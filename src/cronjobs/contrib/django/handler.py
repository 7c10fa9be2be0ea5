"""The job type `django.task.execute`: a task of Django's Tasks framework run by a cronjobs worker.

Its payload, written by `CronjobsBackend.enqueue`: `task` (the task's dotted path,
`Task.module_path`), `args`, `kwargs`, `takes_context`. The worker runs it as any handler:
MAX_RUNTIME, MAX_ATTEMPTS and their retries, the Results tab; the task's return value is
stored as the row's result `{"return_value": ...}`. Registered by the Django app
(`CronjobsConfig.ready`), so the site's own processes (`manage.py cronjobs worker`) know it.
"""

from __future__ import annotations

import json

from ...handler import CronJobHandler, Job

TYPE = "django.task.execute"


class DjangoTask(CronJobHandler):
    """Runs one task of Django's Tasks framework (see the module's docstring).

    Result: `{"return_value": <the task's return value, as JSON>}`.
    """

    TYPE = TYPE
    MAX_ATTEMPTS = 3
    MAX_RUNTIME = 600
    OVERLAP = "allow"
    ANY_QUEUE = True  # a task names its own queue (`queue_name`): `worker --queues` warns of none
    # Its payload names any task of the site by its dotted path: over HTTP, only an admin
    # token may start one (`POST /api/jobs`); the site enqueues through Django.
    DISPATCH_SCOPE = "admin"

    def handle(self, payload: dict, job: Job) -> dict:
        """Import the task named by `payload["task"]` and call it with the payload's args
        and kwargs (and a `TaskContext` first when it takes one).

        Raises:
            ValueError: the payload names no task, or an object that is not a task.
            whatever the task raises (the row fails and is retried as usual).
        """
        import django  # lazy: a worker without Django never runs this
        from django.apps import apps

        if not apps.ready:  # a worker started without manage.py (DJANGO_SETTINGS_MODULE)
            django.setup()
        from django.db import close_old_connections
        from django.utils.module_loading import import_string

        path = payload.get("task")
        if not isinstance(path, str):
            raise ValueError(f"the payload names no task (\"task\": a dotted path), got "
                             f"{path!r:.80}")
        task = import_string(path)
        if getattr(task, "module_path", None) != path or not callable(getattr(task, "call",
                                                                              None)):
            raise ValueError(f"{path!r:.120} is not a task of Django's Tasks framework")
        args, kwargs = payload.get("args") or [], payload.get("kwargs") or {}
        close_old_connections()
        try:
            if payload.get("takes_context"):
                from .compat import TaskContext

                row = {"id": job.id, "status": job.status, "created_at": job.created_at,
                       "started_at": job.started_at, "finished_at": None, "error": None,
                       "traceback": None, "attempts": job.attempts,
                       "worker_id": job.worker_id, "result_payload": None}
                result = task.get_backend().result_from_row(task, row, args, kwargs)
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
        finally:
            close_old_connections()
        return {"success": True, "result": {"return_value": json.loads(json.dumps(value))}}
