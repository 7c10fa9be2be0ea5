"""`@cronjobs.handler(TYPE, **constants)`: a plain function as a handler.

`cronjobs.handler` (a function of the package, `cronjobs/__init__.py`) calls `decorator`
here with `CronJobHandler` as the base (this package sits below the handler contract and
imports nothing of cronjobs). The decorator builds a subclass of the base
whose `handle(payload, job)` calls the function, with each keyword as the class constant
of its upper-case name (`frequency` -> `FREQUENCY`, `max_runtime` -> `MAX_RUNTIME`, ...)
and the optional hooks a class may define (`available`, `idle`, `render_summary`,
`limit_key`, `on_complete`, `on_success`, `on_failure`) as callables. It returns the
function itself, still callable as `fn(payload, job)`, with the class as its
`handler_class` attribute. It registers nothing: the registry (`registry`) takes decorated
functions from the modules it scans (handler folders, the built-in package, entry points)
as it takes classes, any number per module, with the source `<file or module>:<function>`.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

ATTRIBUTE = "handler_class"  # the attribute of a decorated function holding its class
# The hooks a handler class may define, each given as a callable of the arguments after
# `self` or `cls`.
HOOKS = ("available", "idle", "limit_key", "on_complete", "on_failure", "on_success",
         "render_summary")


def keywords(base: type) -> tuple[str, ...]:
    """The keywords `decorator` takes for handler base class `base`: every upper-case
    class constant but TYPE, in lower case, sorted, then the hooks."""
    names = {name.lower() for klass in base.__mro__ for name in vars(klass)
             if name.isupper() and name != "TYPE"}
    return tuple(sorted(names)) + HOOKS


def decorator(base: type, job_type: str, **options: Any) -> Callable[[F], F]:
    """Make the decorated function `fn(payload, job)` the handler of `job_type`.

    Args:
        base: the handler base class (`CronJobHandler`).
        job_type: the job type (str), dotted and ending in `.discover` or `.execute`.
        **options: the class constants in lower case (`frequency="day"`,
            `max_attempts=3`, `max_runtime=600` seconds, `overlap`, `queue`, `schedules`,
            ... every upper-case attribute of `base`), and the hooks as callables:
            `available()`, `idle(app)`, `render_summary(result)`, `limit_key(payload)`,
            `on_complete(family, job)`, `on_success(...)`, `on_failure(...)`. Values are
            checked when the registry loads the handler (`HandlerError` naming the
            function and the constant).

    The function returns what `CronJobHandler.handle` returns (`True`, `False`, a dict,
    or raises `RetryLater`). A function with a parameter named `handler` also gets the
    handler instance there (its `dispatch()` of children, `settings`, `error`).

    Returns:
        A decorator returning the function itself, with `handler_class` set to the
        generated subclass of `base` (named as the function, in its module).

    Raises:
        TypeError: `job_type` is not a str, an unknown keyword (naming it and the allowed
            ones), a hook that is not callable, or the decorated object is not a function.
    """
    if not isinstance(job_type, str):
        raise TypeError(f"cronjobs.handler() takes the job type as its first argument "
                        f"(a str such as 'report.daily.execute'), got {job_type!r:.80}")
    allowed = tuple(dict.fromkeys(keywords(base)))  # a hook that is a constant too: once
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        close = difflib.get_close_matches(unknown[0], allowed, 1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(f"cronjobs.handler() got an unknown keyword {unknown[0]!r}{hint}; "
                        f"allowed: {', '.join(allowed)}")
    for name in HOOKS:
        if name in options and not callable(options[name]):
            raise TypeError(f"cronjobs.handler() keyword {name!r} must be a callable, "
                            f"got {options[name]!r:.80}")

    def decorate(fn: F) -> F:
        if inspect.isclass(fn) or not callable(fn) or not hasattr(fn, "__name__"):
            raise TypeError(f"@cronjobs.handler({job_type!r}) decorates a function "
                            f"fn(payload, job), got {fn!r:.80}")
        _check_signature(fn, job_type)
        setattr(fn, ATTRIBUTE, handler_class(base, job_type, fn, options))
        return fn

    return decorate


def handler_class(base: type, job_type: str, fn: Callable[..., Any],
                  options: dict[str, Any]) -> type:
    """The subclass of `base` running `fn` for `job_type` (see `decorator`).

    Args:
        base: the handler base class.
        job_type: the job type.
        fn: the function `fn(payload, job[, handler=])`.
        options: lower-case constants and hooks, already checked by `decorator`.

    Returns:
        A new class named as `fn`, with `__module__` and `__qualname__` of `fn` (so the
        registry's names, tracebacks and `inspect.getsourcefile` point at its file).
    """
    wants_handler = _takes_handler(fn)

    def handle(self: Any, payload: dict, job: Any) -> Any:
        if wants_handler:
            return fn(payload, job, handler=self)
        return fn(payload, job)

    body: dict[str, Any] = {
        "TYPE": job_type, "FUNCTION": staticmethod(fn), "handle": handle,
        "__module__": fn.__module__, "__qualname__": fn.__qualname__,
        "__doc__": fn.__doc__ or f"Runs {fn.__qualname__}(payload, job)."}
    for name, value in options.items():
        if name in HOOKS:
            body[name] = _hook(name, value)
        else:
            body[name.upper()] = value
    return type(fn.__name__, (base,), body)

def _hook(name: str, fn: Callable[..., Any]) -> Any:
    """`fn` as the class attribute `name`: a classmethod, static method or method whose
    arguments after `cls`/`self` are `fn`'s."""
    if name == "render_summary":
        return staticmethod(fn)
    if name in ("available", "idle"):
        return classmethod(lambda cls, *args: fn(*args))
    return lambda self, *args: fn(*args)


def _check_signature(fn: Callable[..., Any], job_type: str) -> None:
    """Raise TypeError unless `fn` can be called as `fn(payload, job)` (and with
    `handler=` when it names that parameter); a callable without a signature passes."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: judged when run
        return
    extra = {"handler": None} if _takes_handler(fn) else {}
    try:
        signature.bind(None, None, **extra)
    except TypeError as exc:
        raise TypeError(f"@cronjobs.handler({job_type!r}) decorates "
                        f"{getattr(fn, '__qualname__', fn)!s}{signature}, which cannot be "
                        f"called as fn(payload, job) ({exc}): write def "
                        f"{getattr(fn, '__name__', 'fn')}(payload, job)") from None


def _takes_handler(fn: Callable[..., Any]) -> bool:
    """Whether `fn` has a parameter named `handler` (or takes `**kwargs`)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return any(p.name == "handler" and p.kind is not p.POSITIONAL_ONLY for p in parameters)


def handler_class_of(obj: Any) -> type | None:
    """The handler class of a function decorated by `decorator`, or None for anything
    else (a class, a module attribute of another kind)."""
    if inspect.isclass(obj):
        return None
    made = getattr(obj, ATTRIBUTE, None)
    return made if inspect.isclass(made) and getattr(made, "FUNCTION", None) is obj else None


def module_members(module: Any, source: str) -> list[tuple[type, str]]:
    """`(class, source)` of every class of `module` and of every function decorated with
    `decorator` there (its class, source `<source>:<function>`), in name order.

    Args:
        module: an imported module.
        source: the module's source text (a file path, `builtin: X.py`, ...).
    """
    found = []
    for _, obj in inspect.getmembers(module):
        made = handler_class_of(obj)
        if made is not None:
            found.append((made, f"{source}:{obj.__name__}"))
        elif inspect.isclass(obj):
            found.append((obj, source))
    return found
