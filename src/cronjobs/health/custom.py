"""Health checks of your own: an app's or a plugin's checks ("the payment gateway
answers", "the bot token is valid"), run in the health report beside the built-in ones.

    import cronjobs

    @cronjobs.health_check("payment-gateway", timeout=5, ttl=60, critical=False)
    def payment_gateway(check):
        if requests.get(URL, timeout=4).status_code != 200:
            check.fail("the gateway answered 503")      # or check.warn(...)
        check.message = "answered"

The contract: the function takes the `Check` it fills in and returns None. It reports
what is wrong with `check.fail(message)` / `check.warn(message)` (problem `check:<name>`),
and may set `check.message` and `check.data`. A function that raises, returns anything but
None, or has not returned within `timeout` is `check_error` naming the check (the state of
what it watches is unknown), never an outage of the other checks.

Where the checks come from, at each health run: the entry points of the group
`cronjobs.health_checks` (each names a decorated function, a plain function (the check is
named after the entry point), or an object with `name` and optional `timeout`, `ttl`,
`critical` that is called with the `Check`), the modules named in
`CRONJOBS_HEALTH_CHECK_MODULES` (imported, so that their decorators run), and every
function decorated in this process (a handler file's, once the registry loaded it).
"""

from __future__ import annotations

import importlib
import re
import threading
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from .. import durations
from ..bounded import Late, within
from .check import Check, Problem

ENTRY_POINT_GROUP = "cronjobs.health_checks"
BUILTIN_NAMES = frozenset({"database", "broker", "queues", "workers", "scheduler", "overdue",
                           "flow", "resources"})
DEFAULT_TIMEOUT_SECONDS = 3.0
TIMEOUT_MAX_SECONDS = 60.0
TTL_MAX_SECONDS = 86400.0
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}\Z")

_registered: dict[str, HealthCheck] = {}
_wrappers: dict[int, tuple[Any, HealthCheck]] = {}  # id(entry point's object) -> its check
_lock = threading.Lock()


def check_name(name: object) -> str:
    """`name` if it may name a check of your own.

    Raises:
        ValueError: not 1-63 characters of lower-case letters, digits, `.`, `_`, `-`
            (starting with a letter or digit), or the name of a built-in check.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"a health check's name must be 1-63 characters a-z, 0-9, '.', '_' or "
                         f"'-', starting with a letter or digit, got {name!r:.70}")
    if name in BUILTIN_NAMES:
        raise ValueError(f"health check name {name!r} is a built-in check's; choose another")
    return name


class _Flight:
    """One call of a check's function: when it started (monotonic seconds), and its
    answer once the caller that made it has one (its own or "no answer within N s")."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.done = threading.Event()
        self.answer: Check | None = None


class Unloadable(Exception):
    """A module or entry point of health checks could not give a check."""


class HealthCheck:
    """A check of your own, as the report runs it (`check(app, report_check)`).

    Args:
        name: see `check_name`.
        fn: `fn(check: Check) -> None` (the contract in the module's docstring).
        timeout: its answer is awaited this long (seconds or `"5s"`; more than 0, at
            most 60; default 3); then it is `check_error` "no answer within N s".
        ttl: its last answer is reused for this long (seconds or `"1m"`; 0, the default:
            called on every run); the cache is per process.
        critical: True: its `fail` fails the report (`/health` 503) and `/health/ready`
            too. False (default): its `fail` counts as `warn` (the check itself still
            shows `fail`); readiness ignores it.
        monotonic: the time source of the TTL (seconds; `time.monotonic` unless a test
            injects its own).

    Raises:
        ValueError: a bad name, timeout, ttl or critical, naming the value.
    """

    def __init__(self, name: str, fn: Callable[[Check], None], *,
                 timeout: object = DEFAULT_TIMEOUT_SECONDS, ttl: object = 0,
                 critical: bool = False,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.name = check_name(name)
        if not callable(fn):
            raise ValueError(f"health check {name!r} needs a function, got {fn!r:.70}")
        self.fn = fn
        self.timeout_seconds = durations.seconds(
            timeout, name=f"health check {name!r} timeout", maximum=TIMEOUT_MAX_SECONDS)
        self.ttl_seconds = durations.seconds(ttl, name=f"health check {name!r} ttl", zero=True,
                                             maximum=TTL_MAX_SECONDS)
        if not isinstance(critical, bool):
            raise ValueError(f"health check {name!r} critical must be True or False, "
                             f"got {critical!r:.40}")
        self.critical, self.monotonic = critical, monotonic
        self.calls = 0  # how many times `fn` was called (the TTL cache spares calls)
        self.__doc__ = getattr(fn, "__doc__", None)
        self._lock = threading.Lock()
        self._answer: tuple[float, Check] | None = None  # (when, the answer)
        self._flight: _Flight | None = None  # the call of `fn` not returned yet

    def __repr__(self) -> str:
        return f"<health check {self.name} of {origin(self.fn)}>"

    def __call__(self, app: Any, check: Check) -> None:
        """Fill in `check` (the report's) with this check's answer: the cached one within
        `ttl_seconds`; else the answer of the call in progress (another report's), if it
        comes within `timeout_seconds` of its start; else a new call bounded by
        `timeout_seconds`. Never raises; never more than one call of `fn` at a time (a
        hung one is reported "no answer" until it returns)."""
        now = self.monotonic()
        with self._lock:
            cached = self._answer
            if cached is not None and 0 <= now - cached[0] < self.ttl_seconds:
                self._fill(check, cached[1], now - cached[0])
                return
            flight, leader = self._flight, self._flight is None
            if leader:
                flight = self._flight = _Flight(now)
        if not leader:
            flight.done.wait(max(0.0, self.timeout_seconds - (now - flight.started)))
            answer = flight.answer
            if answer is None:
                answer = Check(self.name)
                answer.broke(TimeoutError(f"no answer within {self.timeout_seconds:g} s"))
            self._fill(check, answer, None)
            return
        flight.answer = answer = self._call(flight)
        flight.done.set()
        with self._lock:
            self._answer = (self.monotonic(), answer)
        self._fill(check, answer, None)

    def _call(self, flight: _Flight) -> Check:
        """Call `fn` once in a thread of its own, at most `timeout_seconds`."""
        answer = Check(self.name)
        self.calls += 1
        try:
            within(self.timeout_seconds, lambda: self._guarded(answer, flight),
                   name=f"cronjobs-health-check-{self.name}")
        except Late:
            answer = Check(self.name)  # the hung call may still write into the other one
            answer.broke(TimeoutError(f"no answer within {self.timeout_seconds:g} s"))
        except Exception as exc:  # the check itself broke: check_error, never a crash
            answer.broke(exc)
        return answer

    def _guarded(self, answer: Check, flight: _Flight) -> None:
        """Call `fn(answer)`; the next call may start once this one returned."""
        try:
            returned = self.fn(answer)
        finally:
            with self._lock:
                if self._flight is flight:
                    self._flight = None
        if returned is not None:
            raise TypeError(f"returned {returned!r:.40}; a check returns None and reports "
                            f"with check.fail(...) or check.warn(...)")

    def _fill(self, check: Check, answer: Check, age: float | None) -> None:
        """Copy `answer` into the report's `check`; a non-critical `fail` counts as warn."""
        check.message, check.status = answer.message, answer.status
        check.data = {**answer.data, "health_check": {
            "critical": self.critical, "timeout_seconds": self.timeout_seconds,
            "ttl_seconds": self.ttl_seconds,
            "cached_seconds_ago": None if age is None else round(age, 1)}}
        for p in answer.problems:
            if p.status == "fail" and not self.critical:
                p = Problem(p.key, "warn", f"{p.message} (not critical)")
            check.problems.append(p)


def origin(fn: Any) -> str:
    """`module:qualified name` of a function (or the repr of another object)."""
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(fn)[:80]


def health_check(name: str, *, timeout: object = DEFAULT_TIMEOUT_SECONDS, ttl: object = 0,
                 critical: bool = False) -> Callable[[Callable[[Check], None]], HealthCheck]:
    """Decorator: register `fn(check) -> None` as the health check `name` of this process.

    Args: as `HealthCheck` (timeout and ttl in seconds or `"5s"`, `"1m"`).

    Returns:
        The decorator; it returns the `HealthCheck` (call `.fn` for the function).

    Raises:
        ValueError: at once, for a bad name, timeout, ttl or critical; and from the
            decorator when another function already registered `name` (the same function
            again, e.g. a module imported twice, replaces it).
    """
    durations.seconds(timeout, name=f"health check {name!r} timeout", maximum=TIMEOUT_MAX_SECONDS)
    durations.seconds(ttl, name=f"health check {name!r} ttl", zero=True, maximum=TTL_MAX_SECONDS)
    check_name(name)

    def register(fn: Callable[[Check], None]) -> HealthCheck:
        made = HealthCheck(name, fn, timeout=timeout, ttl=ttl, critical=critical)
        with _lock:
            before = _registered.get(name)
            if before is not None and origin(before.fn) != origin(fn):
                raise ValueError(f"health check {name!r} is registered twice: by "
                                 f"{origin(before.fn)} and by {origin(fn)}")
            _registered[name] = made
        return made

    return register


def registered() -> dict[str, HealthCheck]:
    """The checks registered by the decorator in this process, by name (a copy)."""
    with _lock:
        return dict(_registered)


def unregister(name: str) -> None:
    """Forget the decorated check `name` (tests, a plugin unloaded); no error if unknown."""
    with _lock:
        _registered.pop(name, None)


def app_checks(app: Any) -> list[tuple[str, Callable[[Any, Check], None]]]:
    """The checks of your own for `app`'s health report, sorted by name: `(name, fn(app,
    check))` pairs as `run_health` takes them. A module or entry point that cannot be
    loaded, or names no usable check, is a check of its own that reports `check_error`
    (never an exception here)."""
    found: dict[str, Callable[[Any, Check], None]] = {}
    for module in app.settings.health.check_modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            found[module] = _broken(exc, f"cannot import health check module {module} "
                                         f"(CRONJOBS_HEALTH_CHECK_MODULES)")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            made = _from_object(ep.load(), ep.name)
        except Exception as exc:
            found[ep.name] = _broken(exc, f"entry point {ep.name} ({ep.value})")
            continue
        _add(found, made, f"entry point {ep.name} ({ep.value})")
    for made in registered().values():
        _add(found, made, origin(made.fn))
    return sorted(found.items())


def critical_checks(app: Any) -> list[tuple[str, HealthCheck]]:
    """The critical ones of `app_checks(app)` (what `/health/ready` adds to the database)."""
    return [(n, fn) for n, fn in app_checks(app) if isinstance(fn, HealthCheck) and fn.critical]


def _add(found: dict, made: HealthCheck, source: str) -> None:
    """Add `made` under its name; another check of that name is a `check_error`."""
    before = found.get(made.name)
    if before is None or before is made:
        found[made.name] = made
    else:
        found[made.name] = _broken(ValueError(f"the name is given twice: {before!r} and "
                                              f"{made!r}"), source)


def _from_object(obj: Any, ep_name: str) -> HealthCheck:
    """The `HealthCheck` an entry point's object stands for (made once per object, so its
    TTL cache lasts across runs).

    Raises:
        ValueError: the object is not callable, or its name, timeout, ttl or critical
            is bad.
    """
    if isinstance(obj, HealthCheck):
        return obj
    with _lock:
        kept = _wrappers.get(id(obj))
    if kept is not None and kept[0] is obj:
        return kept[1]
    if not callable(obj):
        raise ValueError(f"names {obj!r:.60}, not a function or a callable check object")
    made = HealthCheck(getattr(obj, "name", ep_name), obj,
                       timeout=getattr(obj, "timeout", DEFAULT_TIMEOUT_SECONDS),
                       ttl=getattr(obj, "ttl", 0), critical=getattr(obj, "critical", False))
    with _lock:
        _wrappers[id(obj)] = (obj, made)
    return made


def _broken(exc: BaseException, source: str) -> Callable[[Any, Check], None]:
    """A check that reports `check_error`: `source` could not give a check (`exc`)."""
    text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__

    def broken(app: Any, check: Check) -> None:
        check.broke(Unloadable(f"{source}: {type(exc).__name__}: {text}"))

    return broken
