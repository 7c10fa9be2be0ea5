"""The `cronjobs` command line: `main` and its commands, one module per group of commands."""

from . import handlers, jobs, ops, tasks, workers  # noqa: F401  (each module registers its commands)
from .base import main

__all__ = ["main"]
