"""The scheduler as a service: `run_forever` ticks at second 0 of every minute (APScheduler)
until it is stopped; `cronjobs scheduler` and `cronjobs serve` run it."""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..app import App
from .scheduler import tick
from .tasks import after_of

log = logging.getLogger("cronjobs.schedule.scheduler")


def run_forever(app: App, stop: threading.Event | None = None, *, background: bool = False) -> Any:
    """Tick at second 0 of every minute with APScheduler until `stop` is set.

    The handlers are loaded first: a handler the worker would refuse stops the scheduler
    here, before its first tick, instead of failing every tick of every task.

    Args:
        background: start a BackgroundScheduler and return it instead of blocking.

    Raises:
        HandlerError, DuplicateHandlerType: a bad or conflicting handler class.
        ConfigError: an AFTER naming no registered task, or a cycle of AFTERs.
    """
    app.handlers.load()
    after_of(app)  # an AFTER naming no task, or a cycle of them: an error before any tick
    # lazy: CLI start-up time (`cronjobs tick` and the dashboard's task pages need no APScheduler)
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.cron import CronTrigger

    scheduler = BackgroundScheduler(timezone="UTC")

    def safe_tick() -> None:
        try:
            report = tick(app=app)
            if report.started:
                log.info("tick %s: started %s", report.now.strftime("%H:%M"),
                         ", ".join(f"{t}#{j}" for t, _, j in report.started))
        except Exception:
            log.exception("tick failed; the next tick will try again")

    scheduler.add_job(safe_tick, CronTrigger(second=0, timezone="UTC"), max_instances=1,
                      coalesce=True, misfire_grace_time=50, id="cronjobs-tick")
    scheduler.start()
    log.info("scheduler started: ticking at second 0 of every minute (UTC)")
    safe_tick()  # do not wait up to a minute for the first tick
    if background:
        return scheduler
    stop = stop or threading.Event()
    stop.wait()
    scheduler.shutdown(wait=True)
    return None
