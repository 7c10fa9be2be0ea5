"""Handler discovery: a `HandlerRegistry` maps job types to handler classes.

Sources, in order: the built-in `handlers` package (`src/handlers/`, one class per file,
file named after the class), every entry point in the group `cronjobs.handlers` (a
handler class, a module of them, or a callable taking `register`), and extra folders
from `CRONJOBS_HANDLER_PATHS` (every `*.py` file but `_*.py` and pytest's test files). A
class without `TYPE`, or that is not a `CronJobHandler`, is skipped with a debug line; two
classes with the same `TYPE` are an error naming both.

**One registry per App.** Every `cronjobs.app.App` builds a `HandlerRegistry` of its own
from its settings (loaded on first use), so two Apps of one process with other handler
folders never see each other's handlers, and nothing global is reset between them (tests,
a worker started from code, the job processes of `cronjobs serve`).

**The default instance.** The module's functions (`register`, `unregister`,
`registered_handlers`, `resolve_handler`, `handler_source`, `task_types`,
`resolve_task_type`, `tasks`, `load`, `reset`) act on `default`, a registry loaded from
`Settings.load()`, for plugins and scripts. A class given to the module's `register()`
(registered by code, not found in a source) is also seen by every App's registry, at
once and for as long as it stays registered: a plugin or script that registers at
import time reaches every App. An App's own sources win where both name a type; the same
class in both is harmless, two classes are `DuplicateHandlerType`. Entry points are
scanned by each registry itself, so they reach every App too.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import threading
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import handlers as builtin_handlers
from cronjobs import limits
from cronjobs.config import Settings
from cronjobs.config.urls import check_ping_url, check_webhook_url
from cronjobs.errors import DuplicateHandlerType, HandlerError, InvalidJob
from cronjobs.flow.rules import handler_limits
from cronjobs.functions.decorator import handler_class_of, module_members
from cronjobs.handler import DISPATCH_SCOPES, OVERLAPS, STAGES, CronJobHandler, task_name
from cronjobs.schedule.catchup import check_handler as check_catchup
from cronjobs.schedule.deadline import check_starting_deadline
from cronjobs.schedule.entry import check_schedules
from cronjobs.schedule.expect import check_expectations
from cronjobs.schedule.jitter import check_handler as check_timing
from cronjobs.schedule.slots import check_frequency

from .folders import import_folder
from .folders import one_line as _one_line

log = logging.getLogger("cronjobs.registry")

ENTRY_POINT_GROUP = "cronjobs.handlers"
CODE_SOURCE = "register()"


class HandlerRegistry:
    """The job type -> handler class map of one App (or the module's default).

    Args:
        settings: a `Settings` for `handler_paths` (None: `Settings.load()` at the load).
        shared: a registry whose classes registered by code (`register()`) this one also
            sees, live (an App's registry: the module's `default`); None for none.
    """

    def __init__(self, settings: Settings | None = None, *,
                 shared: HandlerRegistry | None = None) -> None:
        self.settings = settings
        self._shared = shared
        self._handlers: dict[str, type] = {}
        self._sources: dict[str, str] = {}
        self._coded: set[str] = set()  # types registered by code, not found by a scan
        self._index: tuple[int, dict[str, tuple[str, ...]]] | None = None
        self._version = 0  # bumped on every change (the task index is rebuilt then)
        self.loaded = False
        self.broken: dict[str, str] | None = None  # see `load(skip_broken=True)`
        self._lock = threading.RLock()

    # -- changes ----------------------------------------------------------------------
    def register(self, type: str, handler_class: type, source: str = CODE_SOURCE) -> None:
        """Register `handler_class` for job type `type` (registered by code: an App's
        registry sees those of the default instance too).

        Raises:
            HandlerError: `type` does not end in `.discover`/`.execute`, the class is not a
                `CronJobHandler`, or a class constant (`FREQUENCY`, ...) is invalid.
            DuplicateHandlerType: another class already holds `type` (both are named).
        """
        self._add(type, handler_class, source, coded=True)

    def unregister(self, type: str) -> None:
        """Remove `type` from the map (tests)."""
        with self._lock:
            self._handlers.pop(type, None)
            self._sources.pop(type, None)
            self._coded.discard(type)
            self._version += 1

    def reset(self) -> None:
        """Forget every registration; the next lookup scans again (tests)."""
        with self._lock:
            self._handlers.clear()
            self._sources.clear()
            self._coded.clear()
            self.loaded = False
            self._version += 1

    def load(self, settings: Settings | None = None, *, force: bool = False,
             skip_broken: bool = False) -> None:
        """Scan every source once (again with `force`).

        Args:
            settings: replaces the registry's settings (`handler_paths`) for this load.
            skip_broken: a folder file that does not import, or whose class is refused, is
                skipped, its error kept in `broken` (path -> the error line, then any
                traceback; None after a load without it).

        Raises:
            DuplicateHandlerType, HandlerError: a bad or conflicting handler class.
        """
        with self._lock:
            if self.loaded and not force:
                return
            if settings is not None:
                self.settings = settings
            self.loaded = True  # set first: handler modules may look handlers up while loading
            self.broken = {} if skip_broken else None
            try:
                self._load_all(self.settings or Settings.load())
                self._check_shared()
            except Exception:
                self.reset()
                raise

    # -- lookups ----------------------------------------------------------------------
    def registered_handlers(self) -> dict[str, type]:
        """A copy of the type -> class map (loads the handlers on first call)."""
        self.load()
        with self._lock:
            return {**self._shared_coded(), **self._handlers}

    def resolve_handler(self, type: str) -> type | None:
        """The class registered for `type`, or None."""
        self.load()
        cls = self._handlers.get(type)
        if cls is None and self._shared is not None:
            return self._shared.coded(type)
        return cls

    def handler_source(self, type: str) -> str | None:
        """Where the class of `type` came from (`builtin: X.py`, `entry point x (...)`, a
        file path, `register()`), or None."""
        self.load()
        source = self._sources.get(type)
        if source is None and self._shared is not None and self._shared.coded(type):
            return self._shared.handler_source(type)
        return source

    def coded(self, type: str) -> type | None:
        """The class registered by code (`register()`) for `type`, or None; no load."""
        with self._lock:
            return self._handlers.get(type) if type in self._coded else None

    def task_types(self, task: str) -> list[str]:
        """The registered types of task `task` (discover first)."""
        return list(self._by_task().get(task, ()))

    def resolve_task_type(self, task: str) -> str:
        """The type the scheduler starts for `task`: the one with FREQUENCY, else the
        discover stage, else the execute stage.

        Raises:
            KeyError: no registered type belongs to `task`.
        """
        types = self._by_task().get(task)
        if not types:
            raise KeyError(f"no handler belongs to task {task!r}")
        return self._started_type(types)

    def tasks(self) -> dict[str, str]:
        """Every task name mapped to the type the scheduler starts for it."""
        return {name: self._started_type(types) for name, types in sorted(self._by_task().items())}

    # -- inside -------------------------------------------------------------------------
    def _shared_coded(self) -> dict[str, type]:
        if self._shared is None:
            return {}
        with self._shared._lock:
            return {t: self._shared._handlers[t] for t in self._shared._coded}

    def _check_shared(self) -> None:
        for type, cls in self._shared_coded().items():
            mine = self._handlers.get(type)
            if mine is not None and mine is not cls:
                raise DuplicateHandlerType(
                    f"job type {type!r} is declared by both {class_name(mine)} "
                    f"({self._sources[type]}) and {class_name(cls)} (registered by code)")

    def _started_type(self, types: tuple[str, ...]) -> str:
        for t in types:
            if self.resolve_handler(t).FREQUENCY:
                return t
        return types[0]

    def _by_task(self) -> dict[str, tuple[str, ...]]:
        """Task name -> its types (discover first), built once per registry state (a tick
        over a thousand tasks must not scan every type for each task)."""
        self.load()
        version = (self._version, self._shared._version if self._shared else 0)
        with self._lock:
            if self._index is None or self._index[0] != version:
                index: dict[str, list[str]] = {}
                for t in {**self._shared_coded(), **self._handlers}:
                    index.setdefault(task_name(t), []).append(t)
                self._index = (version, {name: tuple(sorted(types, key=lambda t: STAGES.index(
                    t.rpartition(".")[2]))) for name, types in index.items()})
            return self._index[1]

    def _add(self, type: str, handler_class: type, source: str, *, coded: bool = False) -> None:
        check_class(type, handler_class)
        with self._lock:
            existing, where = self._handlers.get(type), self._sources.get(type)
            if existing is None and self._shared is not None:
                existing, where = self._shared.coded(type), "registered by code"
            if existing is not None and existing is not handler_class:
                raise DuplicateHandlerType(
                    f"job type {type!r} is declared by both {class_name(existing)} ({where}) "
                    f"and {class_name(handler_class)} ({source}); rename one TYPE")
            self._handlers[type] = handler_class
            self._sources[type] = source
            if coded:
                self._coded.add(type)
            self._version += 1

    def _load_all(self, settings: Settings) -> None:
        self._scan_package(builtin_handlers, "builtin")
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                obj = ep.load()
            except Exception as exc:
                raise HandlerError(f"cannot load entry point {ep.name} ({ep.value}): "
                                   f"{_one_line(exc)}") from None
            self._register_object(obj, f"entry point {ep.name} ({ep.value})")
        seen: set[Path] = set()
        for folder in settings.handler_paths:
            path = Path(folder).resolve()
            if path not in seen:  # the same folder named twice is scanned once
                seen.add(path)
                self._scan_folder(Path(folder))

    def _scan_package(self, package: ModuleType, source: str) -> None:
        for info in pkgutil.iter_modules(package.__path__):
            try:
                module = importlib.import_module(f"{package.__name__}.{info.name}")
            except Exception as exc:
                raise HandlerError(f"cannot load handler module {package.__name__}.{info.name}: "
                                   f"{_one_line(exc)}") from None
            self._register_module(module, f"{source}: {info.name}.py")

    def _scan_folder(self, folder: Path) -> None:
        for module, source in import_folder(folder, self.broken):  # one file at a time
            try:
                self._register_module(module, source)
            except HandlerError as exc:  # a bad class constant, a TYPE taken: as broken
                if self.broken is None:
                    raise
                self.broken[source] = str(exc)

    def _register_module(self, module: ModuleType, source: str) -> None:
        for obj, where in module_members(module, source):  # classes, decorated functions
            if obj.__module__ != module.__name__:
                continue
            if not issubclass(obj, CronJobHandler):
                log.debug("skipping %s from %s: not a CronJobHandler", class_name(obj), where)
            elif not obj.TYPE:
                log.debug("skipping %s from %s: no TYPE", class_name(obj), where)
            else:
                self._add(obj.TYPE, obj, where)

    def _register_object(self, obj: Any, source: str) -> None:
        obj = handler_class_of(obj) or obj  # a function decorated with cronjobs.handler
        if inspect.isclass(obj):
            if not (issubclass(obj, CronJobHandler) and obj.TYPE):
                raise HandlerError(f"{source} names {class_name(obj)}, which is not a "
                                   f"CronJobHandler with a TYPE")
            self._add(obj.TYPE, obj, source)
        elif inspect.ismodule(obj):
            self._register_module(obj, source)
        elif callable(obj):
            obj(lambda t, c: self._add(t, c, source))
        else:
            raise HandlerError(f"{source} must name a handler class, a module or a callable, "
                               f"got {obj!r}")


def check_class(type: str, handler_class: type) -> None:
    """Check that `handler_class` may run jobs of `type`.

    Raises:
        HandlerError: naming the class and what is wrong with it.
    """
    if not (inspect.isclass(handler_class) and issubclass(handler_class, CronJobHandler)):
        raise HandlerError(f"{handler_class!r} is not a CronJobHandler subclass")
    name = class_name(handler_class)
    if not isinstance(type, str) or type.rpartition(".")[2] not in STAGES or "." not in type:
        raise HandlerError(f"{name}: TYPE {type!r} must be dotted and end in "
                           f".discover or .execute")
    try:
        limits.check_name(type, "TYPE", limits.TYPE_MAX_CHARS)
        if handler_class.QUEUE is not None:
            limits.check_queue(handler_class.QUEUE)
    except InvalidJob as exc:
        raise HandlerError(f"{name}: {exc}") from None
    for constant, low in (("MAX_ATTEMPTS", 1), ("MAX_RUNTIME", 0)):
        value = getattr(handler_class, constant)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low \
                or (constant == "MAX_ATTEMPTS" and not isinstance(value, int)) \
                or (constant == "MAX_RUNTIME" and value == 0):
            wanted = "an integer >= 1" if low else "a number of seconds > 0"
            raise HandlerError(f"{name}: {constant} must be {wanted}, got {value!r}")
    try:
        check_choices(handler_class)
    except ValueError as exc:
        raise HandlerError(f"{name}: {exc}") from None
    if handler_class.handle is CronJobHandler.handle:
        raise HandlerError(f"{name} does not implement handle(payload, job)")
    if handler_class.FREQUENCY is not None:
        try:
            check_frequency(handler_class.FREQUENCY)
        except ValueError as exc:
            raise HandlerError(f"{name}: {exc}") from None
    try:
        handler_limits(handler_class)
        check_expectations(handler_class)
        check_catchup(handler_class)
        check_schedules(handler_class)
        check_ping_url(handler_class)
        check_webhook_url(handler_class)
        check_starting_deadline(getattr(handler_class, "STARTING_DEADLINE", None))
        check_timing(handler_class)  # TIMEZONE, JITTER, SPREAD
    except ValueError as exc:
        raise HandlerError(f"{name}: {exc}") from None


def check_choices(handler_class: type) -> None:
    """Check the constants of `handler_class` that take one of a few texts: ISOLATION,
    OVERLAP and DISPATCH_SCOPE (one of the token scopes, `handler.DISPATCH_SCOPES`).

    Raises:
        ValueError: naming the constant, the values it takes and the value given.
    """
    if getattr(handler_class, "ISOLATION", "process") not in ("process", "thread"):
        raise ValueError(f"ISOLATION must be 'process' or 'thread', "
                         f"got {handler_class.ISOLATION!r}")
    for constant, choices, default in (("OVERLAP", OVERLAPS, "skip"),
                                       ("DISPATCH_SCOPE", DISPATCH_SCOPES, "dispatch")):
        value = getattr(handler_class, constant, default)
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{constant} must be one of "
                             f"{', '.join(repr(c) for c in choices)}, got {value!r:.60}")


def class_name(cls: type) -> str:
    """`module.Class` of a handler class; just `Class` for one loaded from a folder file
    (its module name is generated; the file is shown as its source)."""
    if cls.__module__.startswith("cronjobs_ext_"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


# -- the default instance and the module's functions ---------------------------------------

default = HandlerRegistry()


def for_settings(settings: Settings) -> HandlerRegistry:
    """A new registry of `settings` that also sees what code registered on `default` (the
    registry every App builds for itself; loaded on first use)."""
    return HandlerRegistry(settings, shared=default)


# The module's functions are the default registry's methods (see the module docstring):
# `register` there is seen by every App; the others act on the default registry alone.
register = default.register
unregister = default.unregister
registered_handlers = default.registered_handlers
resolve_handler = default.resolve_handler
handler_source = default.handler_source
task_types = default.task_types
resolve_task_type = default.resolve_task_type
tasks = default.tasks
load = default.load
reset = default.reset
