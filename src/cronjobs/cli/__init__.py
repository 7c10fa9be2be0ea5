"""The `cronjobs` command line: `main` and its commands, one module per group of commands."""

from . import (  # noqa: F401  (each module registers its commands)
    family,
    flow,
    handlers,
    jobs,
    ops,
    scaffold,
    schedules,
    tasks,
    tokens,
    workers,
)
from .base import main, run

__all__ = ["main", "run"]
