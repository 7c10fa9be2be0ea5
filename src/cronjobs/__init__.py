"""cronjobs: scheduled and background jobs from a database table.

Public API: `CronJobHandler`, `RetryLater`, `Job`, the `queue` module (`dispatch`,
`submit`, `dispatch_many`, `get`, `process`, `recover_stale`, `cleanup`, `wait`) and
`scheduler.tick`, `health_check` (a decorator: a health check of your own, from
`cronjobs.health.custom`) and `handler` (a decorator: `@cronjobs.handler(TYPE, ...)` makes
a function a handler). Nothing is connected at import time.

`cronjobs.handler` is the decorator, so the handler contract module of the same name is
imported here, before the name is bound (the import system binds a submodule's name on its
package when it first loads it): import its names with `from cronjobs.handler import
CronJobHandler` or from `cronjobs` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import CronjobsError
from .handler import CronJobHandler, Job, RetryLater

if TYPE_CHECKING:
    from .health.custom import health_check

__version__ = "0.1.0"
__all__ = ["CronJobHandler", "CronjobsError", "Job", "RetryLater", "__version__", "handler",
           "health_check"]


def handler(job_type: str, /, **options: Any) -> Callable[[Callable], Callable]:
    """`@cronjobs.handler("report.daily.execute", frequency="day", max_attempts=3,
    max_runtime=600)` on a plain function `fn(payload, job)`: that function is the handler
    of `job_type`, a `CronJobHandler` subclass made under the hood (same registry,
    `list-handlers`, limits, OVERLAP, schedules, Results tab).

    Args:
        job_type: the job type (str), dotted, ending in `.discover` or `.execute`.
        **options: the handler's class constants in lower case (`frequency`,
            `max_attempts`, `max_runtime` in seconds, `overlap`, `queue`, `schedules`, ...)
            and its hooks as callables (`available`, `render_summary`, `on_complete`, ...);
            see `cronjobs.functions.decorator.decorator`.

    Returns:
        A decorator that returns the function itself, its class as `fn.handler_class`.

    Raises:
        TypeError: an unknown keyword (naming it and the allowed ones), a `job_type` that is
            not a str, a hook that is not callable, or a decorated object that is not a
            function.
    """
    from .functions.decorator import decorator  # lazy: only handler files call it

    return decorator(CronJobHandler, job_type, **options)


def __getattr__(name: str) -> Any:
    """`cronjobs.health_check`: from `cronjobs.health.custom`, on first use."""
    if name == "health_check":
        from .health import custom  # lazy: `import cronjobs` stays cheap

        globals()[name] = custom.health_check
        return custom.health_check
    raise AttributeError(f"module 'cronjobs' has no attribute {name!r}")
