"""Wait a bounded time for a call that may never return (a database that accepts
connections but never answers: no read timeout reaches every driver)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Late(Exception):
    """The call did not return within its time; it goes on in a daemon thread, which ends
    with the process."""


def within(timeout_seconds: float, call: Callable[[], Any], name: str = "cronjobs-bounded") -> Any:
    """`call()` in a daemon thread (named `name`), waiting at most `timeout_seconds`.

    Returns:
        What `call` returned.

    Raises:
        Late: it had not returned in time.
        whatever `call` raised.
    """
    done, outcome = threading.Event(), []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller
            outcome.append((False, exc))
        done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(timeout_seconds):
        raise Late(f"no answer within {timeout_seconds:g} s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value
