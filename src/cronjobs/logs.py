"""Process logging: one format with the trace id (the row id) on every job line."""

from __future__ import annotations

import logging
import sys


class _TraceDefault(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            record.trace_id = "-"
        return True


def setup(level: str = "INFO") -> None:
    """Log to stderr as `time level logger [trace=<row id>] message`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_TraceDefault())
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s [trace=%(trace_id)s] %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("dramatiq", "pika", "apscheduler", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
