"""The App: settings, clock, engine, handlers and broker of one running system.

This is the edge where the top-level `registry` module is imported; the engine's core
modules get handlers through `App.resolve()` only. Nothing is built at import time: the
first call of `current()` builds the App from `Settings.load()`, and tests install their
own with `use()`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from .broker import Broker
from .clock import SystemClock
from .config import Settings
from .db import make_engine, retry_while_unavailable
from .errors import DatabaseUnavailable

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
        self._engine_given = engine is not None
        self._side_engines: dict[str, Engine] = {}
        self._handlers = handlers
        self._broker: Broker | None = None
        self._executor = None
        self._lock = threading.Lock()
        self.on_send: Callable[[int, str, float], None] | None = None
        self.pool = None  # the worker's SlotPool: messages then only ring it

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
    def executor(self):
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
        """Actor body. In a worker (`self.pool` set) the message is a doorbell: it rings
        the pool, whose producer claims the best due rows of `queue` for its idle slots.
        Without a pool (an in-process consumer in tests), claim the best due row and run it.

        A worker that is stopping or recycling does not claim; it puts the message back
        on the broker for another worker. While the database is unreachable the claim is
        tried again (3 s, doubling to 60 s) until it answers or the worker stops; a
        stopping worker puts the message back. The row stays `pending`: nothing is lost.
        """
        executor = self.executor
        if not executor.accepting:
            self.send(job_id, queue)
            return
        if self.pool is not None:
            self.pool.ring(queue)
            return
        try:
            row = retry_while_unavailable(lambda: executor.claim(queue),
                                          f"claiming a job of queue {queue}",
                                          give_up_seconds=None, stop=executor.stopped)
        except DatabaseUnavailable:
            self.send(job_id, queue)
            return
        if row is not None:
            executor.run_claimed(row)

    def size_pool(self, connections: int) -> None:
        """Give the engine a connection pool of `connections` (the worker: one per slot
        thread plus its own threads), so no connection is opened and closed per job.
        Replaces the engine; call before it is used."""
        if ":memory:" in self.settings.database_url:
            return
        self.engine.dispose()
        self.engine = make_engine(self.settings.database_url, pool_size=connections)

    def side_engine(self, name: str, **options: Any) -> Engine:
        """An engine of its own for one part of this process, made on first use.

        The dashboard's pages (`"web"`) and the health checks (`"health"`) read through
        their own small pools with short timeouts, so they neither wait for the worker's
        connections nor take them (`cronjobs serve` runs all three in one process).

        Args:
            name: which part (`"web"`, `"health"`); the first call's options are kept.
            options: keyword arguments of `db.make_engine` (`pool_size`,
                `pool_timeout_seconds`, `statement_timeout_seconds`).

        Returns:
            The engine, disposed by `close()`; `self.engine` itself when the App was given
            its engine or the database is in memory (another engine would be another
            database).
        """
        if self._engine_given or ":memory:" in self.settings.database_url:
            return self.engine
        with self._lock:
            if name not in self._side_engines:
                self._side_engines[name] = make_engine(self.settings.database_url, **options)
            return self._side_engines[name]

    def using(self, engine: Engine) -> App:
        """This App seen through `engine`: the same settings, clock, handlers and broker,
        but every query made with the returned object's `.engine` goes to `engine`.

        Returns:
            A light view (not a copy): setting an attribute on it sets it on this App.
        """
        return _AppView(self, engine)

    def close(self) -> None:
        """Close the broker and dispose of the engines."""
        if self._broker is not None:
            self._broker.close()
        for engine in self._side_engines.values():
            engine.dispose()
        self.engine.dispose()


class _AppView:
    """An App with another engine (`App.using`); everything else is the App's own."""

    def __init__(self, app: App, engine: Engine) -> None:
        self.__dict__.update(_app=app, engine=engine)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_app"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_app"], name, value)

    def using(self, engine: Engine) -> App:
        """The same App through yet another engine."""
        return _AppView(self.__dict__["_app"], engine)


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
