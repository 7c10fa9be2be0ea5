"""What a handler reaches while it runs: its `JobContext` (the App's settings and clock,
children dispatched through `cronjobs.job.dispatching`) and the `Runtime` of the process
running it (the serve URL)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..app import App
from ..family.view import read_family
from ..handler import Job
from . import dispatching


@dataclass(frozen=True)
class Runtime:
    """What the process running jobs knows besides its settings, handed to every handler
    through `JobContext` (and to job processes when they start).

    Attributes:
        serve_url: the base URL of the `cronjobs serve` process that runs the job
            (`http://127.0.0.1:8080`), or None outside `serve`.
    """

    serve_url: str | None = None


class JobContext:
    """What a handler can reach while it runs (`handler.context`).

    Args:
        app: the App running the job.
        job: the run.
        runtime: what the running process knows besides its settings.
    """

    def __init__(self, app: App, job: Job, runtime: Runtime | None = None) -> None:
        self.app = app
        self.job = job
        self.runtime = runtime or Runtime()

    @property
    def settings(self) -> Any:
        """The system's `Settings`."""
        return self.app.settings

    @property
    def serve_url(self) -> str | None:
        """The base URL of the `cronjobs serve` process running this job, or None."""
        return self.runtime.serve_url

    def now(self) -> datetime:
        """The app clock's current time (naive UTC)."""
        return self.app.clock.now()

    def family(self, root_id: int, *, generation: int | None = None) -> Any:
        """Family `root_id` as it is now (`cronjobs.family.view.Family`), read in a
        transaction of its own; `generation` (a callback's) replaces the number of
        completions recorded so far.

        Raises:
            LookupError: the root row is gone.
        """
        with self.app.engine.connect() as conn:
            family = read_family(conn, root_id)
        if family is None:
            raise LookupError(f"family {root_id} is gone (its root row was deleted)")
        return family if generation is None else replace(family, generation=int(generation))

    def dispatch_child(self, job_type: str, payload: dict, **options: Any) -> int:
        """Dispatch a job whose parent is the running row (the keyword arguments of
        `cronjobs.queue.dispatch`); returns its id.

        Raises:
            InvalidJob: as `cronjobs.queue.dispatch`.
        """
        options.setdefault("parent_id", self.job.id)
        if options["parent_id"] == self.job.id:  # the family's root, for the overlap check
            options.setdefault("root_id", self.job.root_id or self.job.id)
        return dispatching.submit(self.app, job_type, payload, **options).id
