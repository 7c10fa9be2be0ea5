"""The `cronjobs` command line: `main` and its commands, one module per group of commands."""

from . import handlers, jobs, ops, tasks, workers  # noqa: F401  (each module registers its commands)
from . import scaffold  # noqa: F401  (issue 9: new-handler)
from .base import main

__all__ = ["main"]
