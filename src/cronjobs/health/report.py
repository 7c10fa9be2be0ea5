"""The health report: run every check in its own thread and answer within a deadline.

A check that has not answered by the deadline (a hung database or broker) is reported as
`fail` with "no answer within N s"; its thread is a daemon and is left behind, so a hung
server can never hang `cronjobs health`, `/health` or the health task. A check that raises
a database or network error found an outage (`fail`); one that raises anything else (a
missing module, a permission error, a bug) is itself broken: its status is `check_error`,
which never reads as an outage of what it checks. A check of your own (`custom.py`) that
raises or has not answered is always `check_error`.

The checks read through the health engine (`health_engine`): a small pool of their own
whose statements, lock waits and connects end a second after `health_timeout_seconds`.
"""

from __future__ import annotations

import socket
import threading
import time

from sqlalchemy import Engine

from .. import limits
from ..app import App
from ..errors import migrate_first, names_missing_table
from ..store.db import classify, our_error
from .check import Check, CheckFn, HealthReport, worst
from .checks import ALL
from .custom import HealthCheck, app_checks


def health_engine(app: App) -> Engine:
    """The engine the checks read through, apart from the pages' and the worker's pools:
    at most 3 + 3 connections; the wait for a free one ends after `health_timeout_seconds`,
    connecting, a statement and a lock wait one second later (so a hung server is reported
    as "no answer within N s" by the deadline, and its thread ends soon after)."""
    timeout = app.settings.health.timeout_seconds
    return app.side_engine("health", pool_size=3, pool_timeout_seconds=timeout,
                           statement_timeout_seconds=timeout + 1)


def run_health(app: App, timeout_seconds: float | None = None,
               checks: list[tuple[str, CheckFn]] | None = None, *,
               running: dict[str, threading.Thread] | None = None) -> HealthReport:
    """Run every check at the same time and collect what answered within the deadline.

    Args:
        app: the system to check (its database is read through `health_engine(app)`).
        timeout_seconds: the deadline for the whole run (default
            `settings.health.timeout_seconds`).
        checks: `(name, fn(app, check))` pairs (default: `checks.ALL` and the checks of
            your own, `custom.app_checks(app)`).
        running: the check threads of earlier runs by check name (`SharedHealth` keeps
            them): a check whose earlier thread is still running is not started again
            but reported `fail` at once, so a hung server never piles up threads.

    Returns:
        A `HealthReport`. It never raises: a check that raises a database or network
        error is `fail`, one that raises anything else is `check_error`.
    """

    timeout = app.settings.health.timeout_seconds if timeout_seconds is None else timeout_seconds
    checks = checks or ALL + app_checks(app)
    own = {name for name, fn in checks if isinstance(fn, HealthCheck)}
    running = {} if running is None else running
    view = app.using(health_engine(app))
    started, at = time.monotonic(), app.clock.now()
    results, threads, unreached = [], [], set()
    for name, fn in checks:
        check, earlier = Check(name), running.get(name)
        if earlier is not None and earlier.is_alive():
            threads.append(None)
        else:
            running[name] = thread = threading.Thread(
                target=_run_one, args=(fn, view, check, unreached), daemon=True,
                name=f"cronjobs-health-{name}")
            thread.start()
            threads.append(thread)
        results.append(check)
    deadline = started + timeout
    final = []
    for check, thread in zip(results, threads, strict=True):
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        final.append(_late(check.name, timeout, thread is None, check.name in own)
                     if thread is None or thread.is_alive() else check)
    if "database" in unreached:
        final = [_not_checked(c) if c.name in unreached - {"database"} else c for c in final]
    return HealthReport(worst(p.status for c in final for p in c.problems), final, at,
                        (time.monotonic() - started) * 1000)


def _not_checked(found: Check) -> Check:
    """What a check that could not reach the database says when the database check could
    not either: one short line pointing at that check, not the same driver error again."""
    check = Check(found.name, duration_ms=found.duration_ms)
    check.message = "not checked: the database is unavailable (see the database check)"
    check.problem(found.name, "fail", f"{found.name}: {check.message}")
    return check


def _late(name: str, timeout: float, earlier: bool, own: bool = False) -> Check:
    """A check that has not answered by the deadline: `fail` (a hung server), or
    `check_error` for a check of your own (`own`): what it watches is unknown."""
    late = Check(name, duration_ms=timeout * 1000)
    late.message = (f"no answer within {timeout:g} s"
                    + (" (its previous run has not answered yet)" if earlier else ""))
    if own:
        late.broke(TimeoutError(late.message))
        return late
    late.problem(name, "fail", f"{name}: {late.message}")
    return late


def is_outage(exc: BaseException) -> bool:
    """True when a check's exception is what the check looks for (a database or network
    error: the subsystem is down); False when the check itself broke."""
    return classify(exc) is not None or isinstance(
        exc, (ConnectionError, TimeoutError, socket.gaierror, socket.herror))


def _run_one(fn: CheckFn, app: App, check: Check, unreached: set[str]) -> None:
    """Run one check into `check`; add its name to `unreached` when it could not reach
    the database."""
    started = time.monotonic()
    try:
        fn(app, check)
    except Exception as exc:  # a check that breaks is reported, never a crash
        if is_outage(exc):
            if classify(exc) == "unavailable":
                unreached.add(check.name)
                check.message = str(our_error(exc))  # `database unavailable: <driver's line>`
            else:
                text = str(exc).splitlines()[0][:limits.EXCEPTION_TEXT_MAX_CHARS] if str(exc) \
                    else ""
                check.message = (migrate_first() if names_missing_table(text)
                                 else f"{type(exc).__name__}: {text}")
            check.problem(check.name, "fail", f"{check.name}: {check.message}")
        else:
            check.broke(exc)
    check.duration_ms = (time.monotonic() - started) * 1000
