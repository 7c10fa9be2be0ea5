"""Family commands: `cronjobs family ID` (a summary, `--watch`, `--json`) and
`cronjobs family cancel ID`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import click

from .base import JOB_ID, Group, _app, _dump, main

WATCH_SECONDS = 2.0  # how often `--watch` reads the family again
BAR_WIDTH = 30


class FamilyGroup(Group):
    """`cronjobs family ID ...` is `cronjobs family show ID ...`: a first argument that is
    not a sub-command's name is the row id of the summary."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Put `show` in front of arguments that name no sub-command."""
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


@main.group(cls=FamilyGroup)
def family() -> None:
    """A family: a root row and every row under it (children, grandchildren) as one run.

    `cronjobs family ID` prints its summary (the family of ID's root when ID is a row
    under one); `cronjobs family cancel ID` cancels it."""


def summary_lines(fam) -> list[str]:
    """The summary of `fam` (`cronjobs.family.view.Family`): root, counts, duration,
    completions, callback rows and failures grouped, one item a line."""
    from ..family.view import family_line  # lazy: CLI start-up time

    lines = [f"family of {fam.root_id} ({fam.root_type}, {fam.root_status})",
             f"  {family_line(fam)}",
             "  counts: " + (", ".join(f"{s} {n:,}" for s, n in fam.progress.items() if n)
                             or "no rows under the root")]
    if fam.duration_seconds is not None:
        lines.append(f"  duration: {fam.duration_seconds:.1f} s"
                     + ("" if fam.complete else " so far"))
    if fam.generation:
        lines.append(f"  completions: {fam.generation} (last: {fam.outcome}, "
                     f"{fam.completed_at:%Y-%m-%d %H:%M:%S} UTC)")
    for c in fam.callbacks:
        lines.append(f"  callback {c['id']} {c['type']}: {c['status']}")
    if fam.failures:
        lines.append("  failures:")
        for g in fam.failures:
            ids = ", ".join(str(i) for i in g.example_ids)
            lines.append(f"    {g.count:,} × {g.error.splitlines()[0] if g.error else '(no error)'}"
                         f"  (e.g. {ids})")
    return lines


def progress_line(fam) -> str:
    """One line of `--watch`: a bar of finished rows, the counts, rate and ETA."""
    total = fam.total or 1
    filled = int(BAR_WIDTH * fam.done / total) if fam.total else BAR_WIDTH
    p = fam.progress
    rate = fam.rate_per_second
    eta = fam.eta_seconds
    text = (f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {fam.done:,}/{fam.total:,}  "
            f"ok {p['completed']:,} failed {p['failed']:,} running {p['running']:,} "
            f"pending {p['pending']:,}")
    if rate is not None:
        text += f"  {rate:,.1f} rows/s"
    if eta is not None and not fam.complete:
        text += f"  ETA {eta:,.0f} s"
    return text + ("  complete" if fam.complete else "")


def watch(read: Callable[[], object], echo: Callable[[str], None], *, tty: bool,
          interval: float = WATCH_SECONDS, sleep: Callable[[float], None] = time.sleep,
          refreshes: int | None = None):
    """Draw the family's progress until it is complete (or `refreshes` draws).

    Args:
        read: returns the family now (`Family`).
        echo: writes text (no newline added).
        tty: redraw one line in place (a terminal), else one line per refresh.
        interval: seconds between reads.
        sleep: waits `interval` (tests pass their own).
        refreshes: stop after this many draws (None: until complete).

    Returns:
        The family as last read.
    """
    draws = 0
    while True:
        fam = read()
        line = progress_line(fam)
        echo(f"\r\x1b[2K{line}" if tty else line + "\n")
        draws += 1
        if fam.complete or (refreshes is not None and draws >= refreshes):
            if tty:
                echo("\n")
            return fam
        sleep(interval)


@family.command("show")
@click.argument("job_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="Print the family as JSON.")
@click.option("--watch", "watching", is_flag=True,
              help="Redraw a progress bar every 2 s until the family is complete (Ctrl-C "
                   "ends it); piped: one line per refresh.")
@click.option("--refreshes", type=click.IntRange(min=1), default=None, hidden=True,
              help="With --watch: stop after this many refreshes.")
def family_show(job_id: int, as_json: bool, watching: bool, refreshes: int | None) -> None:
    """Print the family of row JOB_ID: root, counts, duration, callback rows and failures
    grouped. Exit 2 for an unknown id."""
    from .. import queue  # lazy: CLI start-up time
    from ..errors import JobNotFound

    app = _app()

    def read():
        fam = queue.family(job_id, app=app)
        if fam is None:
            raise JobNotFound(f"no job with id {job_id}")
        return fam

    fam = read()
    if watching:
        try:
            fam = watch(read, lambda text: click.echo(text, nl=False), refreshes=refreshes,
                        tty=sys.stdout.isatty())
        except KeyboardInterrupt:
            click.echo("")
            return
    if as_json:
        click.echo(_dump(fam.as_dict()))
    elif not watching:
        click.echo("\n".join(summary_lines(fam)))


@family.command("cancel")
@click.argument("job_id", type=JOB_ID)
def family_cancel(job_id: int) -> None:
    """Cancel the family of row JOB_ID: its pending rows are cancelled and its running
    ones stopped (as `cronjobs stop`). Prints the rows changed."""
    from ..actions import operator  # lazy: CLI start-up time

    done = operator.cancel_family(_app(), job_id, who="cli")
    click.echo(f"family of {done['root']}: {done['cancelled']} row(s) cancelled, "
               f"{done['stopping']} asked to stop")
