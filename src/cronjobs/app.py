"""The App: settings, clock, engine, broker and handler registry of one running system.

The App is an edge: it holds what a process was configured with and runs nothing. Jobs are
run by an `executor.Executor` that the runner builds (the worker process, `queue.process`,
`cronjobs run`, `testing.drain`); rows are written by `dispatching`. Settings and engine
are fixed when the App is built and never replaced (a worker that needs a connection per
slot builds its App with `pool_size`). Nothing is built at import time: the first call of
`current()` builds the App from `Settings.load()`, and tests install their own with `use()`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

import registry

from .clock import SystemClock
from .config import Settings
from .handler import CALLBACK_KINDS, STAGES, callback_class, callback_kinds
from .store.engines import autocommit_needs_pool, autocommit_view, make_engine

if TYPE_CHECKING:
    from .broker import Broker


class App:
    """One configured cronjobs system.

    Args:
        settings: the settings (default `Settings.load()`); fixed for the App's life.
        clock: object with `now() -> naive UTC datetime` (default the system clock).
        engine: an existing Engine (default one made from `settings.database_url`).
        handlers: the handler registry: an object with `resolve_handler(type)`,
            `registered_handlers()`, `tasks()`, `task_types(task)`, `handler_source(type)`
            (default a `registry.HandlerRegistry` of this App's settings, which also sees
            classes registered by code on `registry.default`; loaded on first use).
        pool_size: connections the engine keeps open (default 5, as many again for a
            burst); a worker passes `worker.connections_needed(slots)`. Ignored with
            `engine`.

    Attributes:
        serve_url: the base URL of the `cronjobs serve` process this App runs in (set by
            `serve()` before its scheduler starts), None elsewhere; handlers' `idle(app)`
            read it (the built-in uptime task checks that server's own `/health`).
    """

    def __init__(self, settings: Settings | None = None, *, clock: Any = None,
                 engine: Engine | None = None, handlers: Any = None,
                 pool_size: int | None = None) -> None:
        self._settings = settings or Settings.load()
        self.clock = clock or SystemClock()
        self.serve_url: str | None = None
        self._engine_given = engine is not None
        self._engine = engine or make_engine(self._settings.database_url,
                                             **({"pool_size": pool_size} if pool_size else {}))
        self._side_engines: dict[str, Engine] = {}
        # PostgreSQL's and SQLite's `autocommit_engine`; False: none on this backend
        self._autocommit: Engine | bool | None = None
        self._handlers = handlers if handlers is not None else registry.for_settings(self._settings)
        self._broker: Broker | None = None
        self._lock = threading.Lock()

    @property
    def settings(self) -> Settings:
        """The settings (read-only: never reassigned after start)."""
        return self._settings

    @property
    def engine(self) -> Engine:
        """The engine of the App's database (read-only)."""
        return self._engine

    @property
    def handlers(self) -> Any:
        """The handler registry of this App (read-only)."""
        return self._handlers

    # -- handlers -------------------------------------------------------------------
    def resolve(self, job_type: str) -> type | None:
        """The handler class registered for `job_type`, or None. A family callback's
        type (`acme.sync.complete`) resolves to the class that runs the root handler's
        `on_complete` (`handler.callback_class`) when `acme.sync.discover` (or
        `.execute`) defines it."""
        cls = self.handlers.resolve_handler(job_type)
        if cls is None:
            base, _, kind = job_type.rpartition(".")
            if kind in CALLBACK_KINDS and base:
                for stage in STAGES:
                    root = self.handlers.resolve_handler(f"{base}.{stage}")
                    if root is not None and kind in callback_kinds(root):
                        return callback_class(root, kind)
        return cls

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

    # -- broker ---------------------------------------------------------------------
    @property
    def broker(self) -> Broker:
        """The broker (built on first use; a process that consumes calls its `consume`)."""
        with self._lock:
            if self._broker is None:
                # lazy: CLI start-up time (Dramatiq and the Redis/AMQP client are imported
                # by a process that sends or consumes, not by `cronjobs get`).
                from .broker import Broker

                self._broker = Broker(self.settings.broker_url, self.settings.broker_namespace)
            return self._broker

    def side_engine(self, name: str, **options: Any) -> Engine:
        """An engine of its own for one part of this process, made on first use.

        The dashboard's pages (`"web"`) and the health checks (`"health"`) read through
        their own small pools with short timeouts, so they neither wait for the worker's
        connections nor take them (`cronjobs serve` runs all three in one process).

        Args:
            name: which part (`"web"`, `"health"`, `"autocommit"`); the first call's
                options are kept.
            options: keyword arguments of `engines.make_engine` (`pool_size`,
                `pool_timeout_seconds`, `statement_timeout_seconds`, `autocommit`).

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

    @property
    def autocommit_engine(self) -> Engine:
        """The engine for a write of one statement that commits itself (a keyed dispatch
        outside the caller's transaction): no BEGIN, no COMMIT round trip.

        PostgreSQL: `engine` in autocommit mode (psycopg switches on the client, so the
        pool is shared). SQLite: `engine` without its BEGIN IMMEDIATE (`engines.sqlite_autocommit`;
        the same pool, each statement its own transaction: no round trip to save, but two
        statements fewer through SQLAlchemy). MySQL/MariaDB, whose switch is a statement: a
        pool of its own whose connections are in autocommit mode
        (`side_engine("autocommit")`). An App given its engine on MySQL/MariaDB: `engine`
        itself, the statement in a transaction.
        """
        view = self._autocommit  # decided once: a keyed dispatch asks at every call
        if view is None:
            with self._lock:
                if self._autocommit is None:
                    self._autocommit = autocommit_view(self.engine) or False
                view = self._autocommit
        if view is not False:
            return view
        if autocommit_needs_pool(self.engine):
            return self.side_engine("autocommit", autocommit=True)
        return self.engine

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

    @property
    def autocommit_engine(self) -> Engine:
        """The view's engine: a write of one statement made through a view (the
        dashboard's, the health checks') keeps that engine's timeouts, in a transaction."""
        return self.__dict__["engine"]

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
