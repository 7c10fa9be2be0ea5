"""`python -m cronjobs` runs the CLI."""

from .cli import main

main(prog_name="cronjobs")
