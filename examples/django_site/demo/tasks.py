"""The example's tasks: plain functions under the Tasks framework's `@task`."""

try:  # Django >= 6.0
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task


@task()
def add(a: int, b: int) -> int:
    """Return a + b (the worker stores it; `get_result(id).return_value` reads it)."""
    return a + b


@task(priority=10, queue_name="reports")
def report(name: str) -> dict:
    """A task with its own priority and queue."""
    return {"report": name}


@task(takes_context=True)
def attempt(context, value: str) -> dict:
    """A task that reads its context: the attempt number."""
    return {"value": value, "attempt": context.attempt}


@task()
def fail() -> None:
    """A task that always raises."""
    raise RuntimeError("this task always fails")
