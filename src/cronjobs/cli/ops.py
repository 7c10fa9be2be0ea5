"""Operations commands: health, failed, dashboard."""

from __future__ import annotations

import sys

import click

from ..status import Status
from .base import Integer, _app, _dump, _fail, _table, main


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
@click.option("--timeout", type=click.FloatRange(0.1, 60), default=None, metavar="S",
              help="Answer within S seconds (default CRONJOBS_HEALTH_TIMEOUT_SECONDS, 3).")
def health(as_json: bool, timeout: float | None) -> None:
    """Check database, broker, queues, workers, scheduler, overdue tasks, disk and memory,
    and the checks of your own (`@cronjobs.health_check`, entry points
    `cronjobs.health_checks`).

    Exit status 0 ok, 1 warn, 2 fail; 3 when no check failed but a check itself broke
    (check_error: what it checks is unknown)."""
    from ..health import CHECK_ERROR, run_health  # lazy: CLI start-up time

    report = run_health(_app(), timeout)
    if as_json:
        click.echo(_dump(report.as_dict()))
        sys.exit(report.exit_code)
    _table([{"check": c.name, "status": c.status, "message": c.message} for c in report.checks],
           ["check", "status", "message"])
    for problem in report.problems:
        if problem.key.startswith(CHECK_ERROR + ":"):
            click.echo(f"CHECK_ERROR: {problem.message}")
        else:
            click.echo(f"{problem.status.upper()}: {problem.message}")
    broken = report.check_errors
    click.echo(f"health: {report.status}"
               + (f" (check_error: {', '.join(broken)} could not run)" if broken else ""))
    sys.exit(report.exit_code)


@main.command()
@click.option("--type", "job_type", help="Only failed rows of this job type.")
@click.option("--retry", is_flag=True,
              help="Put every failed row (of --type) back to pending, attempts reset: one bulk "
                   "operation, 500 rows a batch, a progress bar on a terminal. Refused (exit 2) "
                   "while a retry of the same rows runs elsewhere; resumes one whose process "
                   "died.")
@click.option("--quiet", "-q", is_flag=True,
              help="With --retry: only the final line (no progress bar; there is none when "
                   "standard error is not a terminal).")
def failed(job_type: str | None, retry: bool, quiet: bool) -> None:
    """Failed rows grouped by type and error pattern, one line per group (the newest 5,000
    grouped: numbers, ids, hex, UUIDs, quoted values and the variable parts of URLs in the
    error count as one), with the count, the newest row and an example; --retry retries
    them."""
    from ..job import failures  # lazy: CLI start-up time

    app = _app()
    if retry:
        _retry_all(app, job_type, quiet)
        return
    with app.engine.connect() as conn:
        groups = failures.groups(conn, job_type)
    if not groups:
        click.echo("no failed rows" + (f" of type {job_type}" if job_type else ""))
        return
    _table([{"count": g["count"], "type": g["type"], "newest": g["newest_id"],
             "pattern": _first_line(g["pattern"], 100),
             "e.g.": "; ".join(f"#{i} {_first_line(text, 100)}" for i, text in g["examples"])}
            for g in groups], ["count", "type", "newest", "pattern", "e.g."])


def _first_line(text: str | None, width: int) -> str:
    """The first line of `text`, at most `width` characters ("..." when cut)."""
    line = (text or "").splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[:width - 3] + "..."


def _retry_all(app, job_type: str | None, quiet: bool) -> None:
    """`failed --retry`: the dashboard's bulk retry, run here in the foreground."""
    from ..actions import bulk  # lazy: CLI start-up time
    from .progress import Progress  # lazy: CLI start-up time

    started = bulk.start(app, "retry", bulk.Selection(Status.FAILED, job_type), who="cli")
    op = started.operation
    verb = "resuming stalled" if started.resumed else "started"
    if not quiet:
        click.echo(f"{verb} operation {op['id']}: retry {op['selection']} "
                   f"({op['done_rows']:,} of {op['total_rows']:,} done)", err=True)
    try:
        with Progress(f"operation {op['id']}: retry", total=op["total_rows"], quiet=quiet,
                      done=op["done_rows"]) as bar:
            op = bulk.run(app, started, on_batch=lambda o: bar.update(o["done_rows"],
                                                                      o["total_rows"]))
    except KeyboardInterrupt:  # the bar has ended its line: the message is a line of its own
        bulk.release(app, started)
        _fail(f"interrupted: operation {op['id']} stopped; `cronjobs failed --retry` "
              "resumes it", 1)
    if op["status"] != "done":  # this run stalled past its lease and another runner took it
        _fail(f"operation {op['id']} was taken over by {op['owner']}; it goes on there", 1)
    skipped = op["done_rows"] - op["changed_rows"]
    click.echo(f"retried {op['changed_rows']} failed row(s)"
               + (f" of type {job_type}" if job_type else "")
               + (f"; {skipped} skipped (no longer failed)" if skipped else ""))


@main.command()
@click.option("--host", default=None, help="Listen address (default CRONJOBS_DASHBOARD_HOST).")
@click.option("--port", type=Integer(0, 65535), default=None,
              help="Port (default CRONJOBS_DASHBOARD_PORT; 0 picks a free one).")
def dashboard(host: str | None, port: int | None) -> None:
    """Serve the dashboard only (no worker, no scheduler) until SIGTERM/SIGINT.

    Needs CRONJOBS_DASHBOARD_TOKEN unless it listens on loopback (then it prints a
    generated token)."""
    from ..web.server import run_dashboard  # lazy: CLI start-up time

    app = _app()
    sys.exit(run_dashboard(app, host or app.settings.dashboard.host,
                           app.settings.dashboard.port if port is None else port))
