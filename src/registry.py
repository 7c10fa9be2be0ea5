"""Handler discovery: builds the job type -> handler class map.

Sources, in order: the built-in `handlers` package (`src/handlers/`, one class per file,
file named after the class), every entry point in the group `cronjobs.handlers` (a
handler class, a module of them, or a callable taking `register`), and extra folders
from `CRONJOBS_HANDLER_PATHS` (every `*.py` file but `_*.py` and pytest's test files). A
class without `TYPE`, or that is not a `CronJobHandler`, is skipped with a debug line; two
classes with the same `TYPE` are an error naming both.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import logging
import pkgutil
import sys
import threading
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from cronjobs import limits
from cronjobs.errors import DuplicateHandlerType, HandlerError, InvalidJob
from cronjobs.handler import STAGES, CronJobHandler, task_name
from cronjobs.slots import check_frequency

log = logging.getLogger("cronjobs.registry")

ENTRY_POINT_GROUP = "cronjobs.handlers"

_handlers: dict[str, type] = {}
_sources: dict[str, str] = {}
_task_index: dict[str, tuple[str, ...]] | None = None  # rebuilt after every change
_loaded = False
_lock = threading.RLock()


def register(type: str, handler_class: type, source: str = "register()") -> None:
    """Register `handler_class` for job type `type`.

    Raises:
        HandlerError: `type` does not end in `.discover`/`.execute`, the class is not a
            `CronJobHandler`, or its `FREQUENCY` is invalid.
        DuplicateHandlerType: another class already holds `type` (both are named).
    """
    if not (inspect.isclass(handler_class) and issubclass(handler_class, CronJobHandler)):
        raise HandlerError(f"{handler_class!r} is not a CronJobHandler subclass")
    if not isinstance(type, str) or type.rpartition(".")[2] not in STAGES or "." not in type:
        raise HandlerError(f"{_name(handler_class)}: TYPE {type!r} must be dotted and end in "
                           f".discover or .execute")
    try:
        limits.check_name(type, "TYPE", limits.TYPE_MAX_CHARS)
        if handler_class.QUEUE is not None:
            limits.check_queue(handler_class.QUEUE)
    except InvalidJob as exc:
        raise HandlerError(f"{_name(handler_class)}: {exc}") from None
    for name, low in (("MAX_ATTEMPTS", 1), ("MAX_RUNTIME", 0)):
        value = getattr(handler_class, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low \
                or (name == "MAX_ATTEMPTS" and not isinstance(value, int)) \
                or (name == "MAX_RUNTIME" and value == 0):
            raise HandlerError(f"{_name(handler_class)}: {name} must be "
                               f"{'an integer >= 1' if low else 'a number of seconds > 0'}, "
                               f"got {value!r}")
    if getattr(handler_class, "ISOLATION", "process") not in ("process", "thread"):
        raise HandlerError(f"{_name(handler_class)}: ISOLATION must be 'process' or 'thread', "
                           f"got {handler_class.ISOLATION!r}")
    if handler_class.handle is CronJobHandler.handle:
        raise HandlerError(f"{_name(handler_class)} does not implement handle(payload, job)")
    if handler_class.FREQUENCY is not None:
        try:
            check_frequency(handler_class.FREQUENCY)
        except ValueError as exc:
            raise HandlerError(f"{_name(handler_class)}: {exc}") from None
    with _lock:
        existing = _handlers.get(type)
        if existing is not None and existing is not handler_class:
            raise DuplicateHandlerType(
                f"job type {type!r} is declared by both {_name(existing)} ({_sources[type]}) "
                f"and {_name(handler_class)} ({source}); rename one TYPE")
        _handlers[type] = handler_class
        _sources[type] = source
        _forget_index()


def _forget_index() -> None:
    global _task_index
    _task_index = None


def unregister(type: str) -> None:
    """Remove `type` from the map (tests)."""
    with _lock:
        _handlers.pop(type, None)
        _sources.pop(type, None)
        _forget_index()


def registered_handlers() -> dict[str, type]:
    """A copy of the type -> class map (loads the handlers on first call)."""
    load()
    with _lock:
        return dict(_handlers)


def handler_source(type: str) -> str | None:
    """Where the class of `type` came from (`builtin`, `entry point x`, a file path)."""
    return _sources.get(type)


def resolve_handler(type: str) -> type | None:
    """The class registered for `type`, or None."""
    load()
    return _handlers.get(type)


def task_types(task: str) -> list[str]:
    """The registered types of task `task` (discover first)."""
    return list(_by_task().get(task, ()))


def resolve_task_type(task: str) -> str:
    """The type the scheduler starts for `task`: the one with FREQUENCY, else the
    discover stage, else the execute stage.

    Raises:
        KeyError: no registered type belongs to `task`.
    """
    types = _by_task().get(task)
    if not types:
        raise KeyError(f"no handler belongs to task {task!r}")
    return _started_type(types)


def tasks() -> dict[str, str]:
    """Every task name mapped to the type the scheduler starts for it."""
    return {name: _started_type(types) for name, types in sorted(_by_task().items())}


def _started_type(types: tuple[str, ...]) -> str:
    for t in types:
        if _handlers[t].FREQUENCY:
            return t
    return types[0]


def _by_task() -> dict[str, tuple[str, ...]]:
    """Task name -> its types (discover first), built once per registry state (a tick over
    a thousand tasks must not scan every type for each task)."""
    global _task_index
    load()
    with _lock:
        if _task_index is None:
            index: dict[str, list[str]] = {}
            for t in _handlers:
                index.setdefault(task_name(t), []).append(t)
            _task_index = {name: tuple(sorted(types, key=lambda t: STAGES.index(
                t.rpartition(".")[2]))) for name, types in index.items()}
        return _task_index


def load(settings: Any = None, *, force: bool = False) -> None:
    """Scan every source once (again with `force`).

    Args:
        settings: a `Settings` for `handler_paths` (default `Settings.load()`).

    Raises:
        DuplicateHandlerType, HandlerError: a bad or conflicting handler class.
    """
    global _loaded
    with _lock:
        if _loaded and not force:
            return
        _loaded = True  # set first: handler modules may look handlers up while loading
        try:
            _load_all(settings)
        except Exception:
            _handlers.clear()
            _sources.clear()
            _loaded = False
            _forget_index()
            raise


def _load_all(settings: Any) -> None:
    if settings is None:
        from cronjobs.config import Settings

        settings = Settings.load()
    import handlers as builtin

    _scan_package(builtin, "builtin")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            raise HandlerError(f"cannot load entry point {ep.name} ({ep.value}): "
                               f"{_one_line(exc)}") from None
        _register_object(obj, f"entry point {ep.name} ({ep.value})")
    seen: set[Path] = set()
    for folder in settings.handler_paths:
        path = Path(folder).resolve()
        if path not in seen:  # the same folder named twice is scanned once
            seen.add(path)
            _scan_folder(Path(folder))


def reset() -> None:
    """Forget every registration; the next lookup scans again (tests)."""
    global _loaded
    with _lock:
        _handlers.clear()
        _sources.clear()
        _loaded = False
        _forget_index()


def class_name(cls: type) -> str:
    """`module.Class` of a handler class; just `Class` for one loaded from a folder file
    (its module name is generated; the file is shown as its source)."""
    if cls.__module__.startswith("cronjobs_ext_"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


_name = class_name


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _scan_package(package: ModuleType, source: str) -> None:
    for info in pkgutil.iter_modules(package.__path__):
        try:
            module = importlib.import_module(f"{package.__name__}.{info.name}")
        except Exception as exc:
            raise HandlerError(f"cannot load handler module {package.__name__}.{info.name}: "
                               f"{_one_line(exc)}") from None
        _register_module(module, f"{source}: {info.name}.py")


def _scan_folder(folder: Path) -> None:
    if not folder.is_dir():
        raise HandlerError(f"handler folder {str(folder)!r} (CRONJOBS_HANDLER_PATHS) "
                           "does not exist")
    tag = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:8]
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_") or _is_test_file(path.name):
            log.debug("skipping %s: private or test file", path)
            continue
        name = f"cronjobs_ext_{tag}_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise HandlerError(f"cannot load handler file {path}: {_one_line(exc)}") from None
        _register_module(module, str(path))


def _is_test_file(name: str) -> bool:
    """pytest's file names (`test_*.py`, `*_test.py`, `conftest.py`): tests may sit next to
    the handlers they test (`cronjobs new-handler` puts them there) without being loaded."""
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def _register_module(module: ModuleType, source: str) -> None:
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if obj.__module__ != module.__name__:
            continue
        _register_class(obj, source)


def _register_class(cls: type, source: str) -> None:
    if not issubclass(cls, CronJobHandler):
        log.debug("skipping %s from %s: not a CronJobHandler", _name(cls), source)
        return
    if not cls.TYPE:
        log.debug("skipping %s from %s: no TYPE", _name(cls), source)
        return
    register(cls.TYPE, cls, source)


def _register_object(obj: Any, source: str) -> None:
    if inspect.isclass(obj):
        if not (issubclass(obj, CronJobHandler) and obj.TYPE):
            raise HandlerError(f"{source} names {_name(obj)}, which is not a CronJobHandler "
                               "with a TYPE")
        register(obj.TYPE, obj, source)
    elif inspect.ismodule(obj):
        _register_module(obj, source)
    elif callable(obj):
        obj(lambda t, c: register(t, c, source))
    else:
        raise HandlerError(f"{source} must name a handler class, a module or a callable, "
                           f"got {obj!r}")
