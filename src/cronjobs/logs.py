"""Process logging: one format with the trace id (the row id) on every job line."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from pathlib import Path


class _TraceDefault(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            record.trace_id = "-"
        return True


def setup(level: str = "INFO") -> None:
    """Log to stderr as `time level logger [trace=<row id>] message`, at `level` (a level
    name) and above. Nothing is done when this process logs so already (a job process
    forked from a fork server that set it up: a new setup writes to every logger, so to
    pages it shares with its fork server)."""
    root = logging.getLogger()
    if root.level == logging.getLevelName(level.upper()) and len(root.handlers) == 1 \
            and getattr(root.handlers[0], "cronjobs_stream", None) is sys.stderr:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.cronjobs_stream = sys.stderr
    handler.addFilter(_TraceDefault())
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s [trace=%(trace_id)s] %(message)s"))
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("dramatiq", "pika", "apscheduler", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class DailyFileHandler(logging.Handler):
    """Writes to `DIR/workers-YYYY-MM-DD.log` (UTC date), opening a new file each day."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._date: str | None = None
        self._file = None

    def emit(self, record: logging.LogRecord) -> None:
        """Write one formatted line to today's file."""
        try:
            date = datetime.now(UTC).strftime("%Y-%m-%d")
            if date != self._date:
                if self._file is not None:
                    self._file.close()
                self._file = open(self.directory / f"workers-{date}.log", "a", encoding="utf-8")
                self._date = date
            self._file.write(self.format(record) + "\n")
            self._file.flush()
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        """Close today's file."""
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


def add_daily_file(directory: str | None) -> None:
    """Also log to `directory/workers-YYYY-MM-DD.log` (nothing when `directory` is None)."""
    if not directory:
        return
    root = logging.getLogger()
    handler = DailyFileHandler(directory)
    handler.addFilter(_TraceDefault())
    handler.setFormatter(root.handlers[0].formatter if root.handlers else logging.Formatter())
    root.addHandler(handler)
