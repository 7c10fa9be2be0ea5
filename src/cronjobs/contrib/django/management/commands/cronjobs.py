"""`python manage.py cronjobs <command>`: every `cronjobs` command (worker, worker --burst,
scheduler, migrate, health, ...) with the site's settings: the cronjobs database is the
database of Django's `default` connection unless the cronjobs settings name another
(`contrib.django.connect`), and the site's tasks are importable by the worker."""

from __future__ import annotations

import argparse
import os
import sys

from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from ... import connect


class Command(BaseCommand):
    """Hands its arguments to the `cronjobs` command line unchanged (`--help` included)."""

    help = "Run a cronjobs command with this site's database: manage.py cronjobs worker --burst"
    requires_system_checks: list = []

    def add_arguments(self, parser) -> None:
        """Everything after `cronjobs` goes to the cronjobs command line."""
        parser.add_argument("arguments", nargs=argparse.REMAINDER)

    def run_from_argv(self, argv: list[str]) -> None:
        """`manage.py cronjobs ARGS`: run `cronjobs ARGS`; exits with its status (2 and
        one line `error: ...` when the site's database cannot be used, as `cronjobs`)."""
        try:
            _run(argv[2:], f"{os.path.basename(argv[0])} cronjobs")
        except CommandError as exc:
            from .....cli.base import EXIT_BAD_INPUT

            sys.stderr.write(f"error: {exc}\n")
            sys.exit(EXIT_BAD_INPUT)

    def handle(self, *args, **options) -> None:
        """`call_command("cronjobs", "migrate")`: run it; raises SystemExit on failure."""
        try:
            _run([*args, *options.get("arguments", [])], "cronjobs")
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise


def _run(arguments: list[str], prog_name: str) -> None:
    """Run `cronjobs ARGUMENTS` with the site's database (exits with its status).

    Raises:
        CommandError: the site's database cannot be used by cronjobs (named).
    """
    from .....cli import main  # lazy: Django's own commands need none of it
    from .....errors import CronjobsError

    try:
        os.environ["CRONJOBS_DATABASE_URL"] = connect.cronjobs_database_url()
    except CronjobsError as exc:
        raise CommandError(str(exc)) from None
    connections.close_all()  # a worker forks its job processes: no shared socket
    main(args=arguments, prog_name=prog_name)
