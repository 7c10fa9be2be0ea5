"""The App: settings, clock, engine, handlers and broker of one running system.

This is the edge where the top-level `registry` module is imported; the engine's core
modules get handlers through `App.resolve()` only. Nothing is built at import time: the
first call of `current()` builds the App from `Settings.load()`, and tests install their
own with `use()`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from .broker import Broker
from .clock import SystemClock
from .config import Settings
from .db import make_engine
from .errors import StoreError

log = logging.getLogger("cronjobs")


class App:
    """One configured cronjobs system.

    Args:
        settings: the settings (default `Settings.load()`).
        clock: object with `now() -> naive UTC datetime` (default the system clock).
        engine: an existing Engine (default one made from `settings.database_url`).
        handlers: object with `resolve_handler(type)` and `registered_handlers()`
            (default the top-level `registry` module, loaded on first use).
    """

    def __init__(self, settings: Settings | None = None, *, clock: Any = None,
                 engine: Engine | None = None, handlers: Any = None) -> None:
        self.settings = settings or Settings.load()
        self.clock = clock or SystemClock()
        self.engine = engine or make_engine(self.settings.database_url)
        self._handlers = handlers
        self._broker: Broker | None = None
        self._executor = None
        self._lock = threading.Lock()
        self.on_send: Callable[[int, str, float], None] | None = None
        self._outage = Outage()

    # -- handlers -------------------------------------------------------------------
    @property
    def handlers(self) -> Any:
        """The handler registry (the top-level `registry` module unless injected)."""
        if self._handlers is None:
            import registry

            registry.load(self.settings)
            self._handlers = registry
        return self._handlers

    def resolve(self, job_type: str) -> type | None:
        """The handler class registered for `job_type`, or None."""
        return self.handlers.resolve_handler(job_type)

    def queues(self) -> list[str]:
        """Every queue a registered handler uses, plus the default queue, sorted."""
        names = {self.settings.default_queue}
        for cls in self.handlers.registered_handlers().values():
            names.add(cls.QUEUE or self.settings.default_queue)
        return sorted(names)

    def queue_of(self, job_type: str) -> str:
        """The broker queue of `job_type` (its handler's QUEUE, else the default)."""
        cls = self.resolve(job_type)
        return (cls.QUEUE if cls is not None and cls.QUEUE else self.settings.default_queue)

    # -- broker and worker side ---------------------------------------------------
    @property
    def broker(self) -> Broker:
        """The broker (built on first use)."""
        with self._lock:
            if self._broker is None:
                self._broker = Broker(self.settings.broker_url, self.settings.broker_namespace,
                                      self.handle_message)
            return self._broker

    @property
    def executor(self):  # noqa: ANN201
        """This process's `Executor` (built on first use)."""
        with self._lock:
            if self._executor is None:
                from .executor import Executor

                self._executor = Executor(self)
            return self._executor

    def send(self, job_id: int, queue: str, delay_seconds: float = 0) -> None:
        """Put row `job_id` on the broker; a failure is logged, the sweep resends later."""
        if self.on_send is not None:
            self.on_send(job_id, queue, delay_seconds)
        try:
            self.broker.send(job_id, queue, delay_seconds)
        except Exception as exc:  # the row is the truth; the sweep will resend it
            log.warning("could not send job %s to queue %s (%s); the sweep will resend it",
                        job_id, queue, exc)

    def handle_message(self, queue: str, job_id: int) -> None:
        """Actor body: claim the best due row of `queue` and run it.

        A worker that is stopping or recycling does not claim; it puts the message back
        on the broker for another worker. When the database is down the thread waits
        (3 s, doubling up to 60 s, shared by all threads), puts the message back and
        returns: the row stays `pending`, nothing is lost.
        """
        executor = self.executor
        if not executor.accepting:
            self.send(job_id, queue)
            return
        self._outage.wait()
        try:
            executor.run_next(queue)
            self._outage.ok()
        except (DBAPIError, StoreError) as exc:
            self._outage.failed(exc)
            self.send(job_id, queue)

    def close(self) -> None:
        """Close the broker and dispose of the engine."""
        if self._broker is not None:
            self._broker.close()
        self.engine.dispose()


class Outage:
    """Shared back-off while the database is down: 3 s, doubling up to 60 s."""

    def __init__(self, first_seconds: float = 3.0, cap_seconds: float = 60.0) -> None:
        self.first, self.cap = first_seconds, cap_seconds
        self._pause = 0.0
        self._until = 0.0
        self._lock = threading.Lock()

    def failed(self, exc: BaseException) -> None:
        """Note a failure; the next `wait()` calls sleep until the pause is over."""
        import time

        with self._lock:
            self._pause = min(self.cap, self._pause * 2) if self._pause else self.first
            self._until = time.monotonic() + self._pause
            log.warning("database unavailable (%s: %s); workers wait %.0f s",
                        type(exc).__name__, str(exc).splitlines()[0][:200], self._pause)

    def ok(self) -> None:
        """Note a success: the back-off starts over."""
        if self._pause:
            with self._lock:
                if self._pause:
                    log.info("database reachable again")
                self._pause = 0.0

    def wait(self) -> None:
        """Sleep while a pause is in force."""
        import time

        delay = self._until - time.monotonic()
        if delay > 0:
            time.sleep(delay)


_current: App | None = None
_current_lock = threading.Lock()


def current() -> App:
    """The App of this process (built from `Settings.load()` on first call)."""
    global _current
    with _current_lock:
        if _current is None:
            _current = App()
        return _current


def use(app: App | None) -> App | None:
    """Install `app` as this process's App (None clears it); returns the previous one."""
    global _current
    with _current_lock:
        previous, _current = _current, app
        return previous
