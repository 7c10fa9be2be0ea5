"""`cronjobs serve`: scheduler + worker + web front in one process (the embedded mode)."""

from __future__ import annotations

import logging
import threading

from .app import App
from .schedule.service import run_forever
from .web.server import login_hint, open_server
from .worker.loop import Signals, WorkerProcess

log = logging.getLogger("cronjobs.serve")


def serve(app: App, host: str, port: int, slots: int = 4, *, shutdown_timeout: float = 30,
          signals: Signals | None = None, on_ready=None) -> int:
    """Run everything until SIGTERM/SIGINT; returns 0 after a clean stop, 1 when the
    worker's job loop broke (the process must be restarted).

    The worker is given this server's base URL (`JobContext.serve_url`): when no uptime
    URLs or checks are configured, the built-in uptime task checks this server's own
    `/health`, so a fresh install does real work with no internet; `app.serve_url` is set to
    it before the scheduler starts (so that task is not idle). On loopback with no
    `dashboard_token`, a token is generated (kept in the database) and printed. The App's
    settings are never changed: the job processes' settings equal their fork server's, so
    they run jobs with its preloaded App.

    Args:
        app: the App; give it a pool of `worker.connections_needed(slots)`.
        host, port: where the web front listens (port 0 picks a free port); a host
            other than loopback needs a configured token (ConfigError otherwise).
        slots: jobs the worker runs at the same time (one job process each).
        shutdown_timeout: seconds running jobs may take to finish after SIGTERM.
        on_ready: called with the base URL once everything runs.
    """
    signals = signals or Signals("serve: stopping; no new ticks, no new jobs, finishing the "
                                 "running ones", log).install()
    server, url, generated = open_server(app, host, port)
    web_thread = threading.Thread(target=server.serve_forever, name="cronjobs-web", daemon=True)
    web_thread.start()
    app.serve_url = url  # the uptime task is not idle here: it checks this server's /health
    worker = WorkerProcess(app, app.queues(), slots, serve_url=url)
    worker.start()
    scheduler = run_forever(app, background=True)
    print(f"cronjobs is running: dashboard at {url}/  (Ctrl-C to stop)\n"
          f"{login_hint(url, generated)}", flush=True)
    if on_ready is not None:
        on_ready(url)
    while not signals.stop.wait(0.2) and not worker.failed:
        pass
    log.info("stopping: scheduler, worker, web")
    scheduler.shutdown(wait=True)
    worker.shutdown(shutdown_timeout, signals.urgent)
    server.shutdown()
    return 1 if worker.failed else 0
