"""Progress of a long command: click's progress bar on a terminal, nothing otherwise.

`cronjobs cleanup`, `failed --retry`, `dispatch --stdin` and `migrate` report their counts
through a `Progress`. On a terminal (standard error is a TTY) it draws one line, redrawn
in place: a label, a bar, the percentage and time left when the total is known, and
`1,000/5,000 rows  2,345 rows/s`. Piped, redirected or with `--quiet` it writes nothing
(no carriage returns in a log file): the command's own final line says what was done.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from types import TracebackType

import click


class Progress:
    """Counts and rate of one long command, drawn on standard error when it is a terminal.

    Use as a context manager; call `update(done)` with the count so far (absolute, not a
    step) as often as there is news.

    Args:
        label: what is being done (`deleting old rows`), shown left of the bar.
        total: how many `unit`s there are, when known (None: a bar without an end, the
            count and the rate only).
        unit: what is counted (`rows`, `revisions`), in the count and the rate.
        quiet: draw nothing (`--quiet`).
        done: the count already done before this run (a resumed operation): the rate
            counts only what this run does.
        describe: `fn(progress) -> str`, the text right of the bar (default `text`:
            the count and the rate); `note` is the last one given to `update`.
    """

    def __init__(self, label: str, total: int | None = None, unit: str = "rows", *,
                 quiet: bool = False, done: int = 0,
                 describe: Callable[[Progress], str] | None = None) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = done
        self.note = ""
        self._describe = describe or Progress.text
        self.shown = not quiet and sys.stderr.isatty()
        self._first = done
        self._started = time.monotonic()
        self._bar = None

    def __enter__(self) -> Progress:
        if self.shown:
            known = self.total is not None
            self._bar = click.progressbar(
                None if known else itertools.count(), length=self.total if known else None,
                label=self.label, file=sys.stderr, show_eta=known, show_percent=known,
                item_show_func=lambda _: self._describe(self))
            self._bar.__enter__()
            if self.done:
                self._bar.update(self.done)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
            self._bar = None

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        """Set the count done so far (and the total, when it changed; a `note` for
        `describe`)."""
        self.note = note
        if total is not None and self._bar is not None and self._bar.length is not None:
            self._bar.length = self.total = total
        step, self.done = done - self.done, done
        if self._bar is not None:
            self._bar.update(step)

    def rate(self) -> float:
        """`unit`s per second done by this run so far (0 before the first second's news)."""
        seconds = time.monotonic() - self._started
        return (self.done - self._first) / seconds if seconds > 0 else 0.0

    def text(self) -> str:
        """`1,000/5,000 rows  2,345 rows/s` (or `1,000 rows  ...` without a total)."""
        count = f"{self.done:,}" + (f"/{self.total:,}" if self.total is not None else "")
        return f"{count} {self.unit}  {self.rate():,.0f} {self.unit}/s"
