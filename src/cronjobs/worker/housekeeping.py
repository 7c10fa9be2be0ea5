"""The worker's background thread: lease renewal, heartbeat, sweep and recycling limits.

Each duty runs at its own interval; a failing duty (database down) is logged and tried
again at its next turn, it never ends the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("cronjobs.worker.loop")


class Housekeeper(threading.Thread):
    """Runs `duties` — `(name, interval_seconds, fn)` — until `stop()`.

    Args:
        duties: each `fn()` is called every `interval_seconds` (first call after one
            interval).
        tick_seconds: how often the loop wakes up to look for due duties.
    """

    def __init__(self, duties: list[tuple[str, float, Callable[[], object]]],
                 tick_seconds: float = 0.5) -> None:
        super().__init__(name="cronjobs-housekeeper", daemon=True)
        self.duties = duties
        self.tick_seconds = tick_seconds
        self._stop_event = threading.Event()
        self._failures: dict[str, int] = {}

    def run(self) -> None:
        """Loop until `stop()`."""
        now = time.monotonic()
        due = {name: now + interval for name, interval, _ in self.duties}
        while not self._stop_event.wait(self.tick_seconds):
            for name, interval, fn in self.duties:
                if time.monotonic() < due[name]:
                    continue
                due[name] = time.monotonic() + interval
                try:
                    fn()
                    if self._failures.pop(name, 0):
                        log.info("%s works again", name)
                except Exception as exc:  # database or broker down: try again next turn
                    count = self._failures[name] = self._failures.get(name, 0) + 1
                    if count == 1 or count % 20 == 0:
                        log.warning("%s failed (%s: %s); retrying every %.0f s", name,
                                    type(exc).__name__, exc, interval)

    def stop(self) -> None:
        """End the loop (the current duty finishes first)."""
        self._stop_event.set()
