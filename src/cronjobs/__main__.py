"""`python -m cronjobs` runs the CLI."""

from .cli import run

run()
