"""`cronjobs new-handler`: write a new handler (or discover/execute pair) and its test."""

from __future__ import annotations

import click

from .base import main


@main.command("new-handler",
              short_help="Write a new handler (or discover/execute pair) and its test.")
@click.argument("name")
@click.option("--discover", is_flag=True,
              help="Also write a discover stage (scheduled @hourly) that fans out one execute "
                   "job per target.")
@click.option("--folder", type=click.Path(file_okay=False),
              help="Write here instead of the first handler folder (CRONJOBS_HANDLER_PATHS).")
def new_handler(name: str, discover: bool, folder: str | None) -> None:
    """Write handler NAME (the type without its stage, e.g. acme.quota_sync) and a test
    file into the first handler folder, and a pytest.ini there if it has none (its tests
    then ignore the pytest settings of the folders above). Refuses to overwrite a file.

    The generated test passes as generated: python -m pytest FOLDER/test_NAME.py"""
    from ..app import current  # lazy: CLI start-up time
    from ..errors import ConfigError
    from .handlerfiles import files, write, write_pytest_ini

    contents = files(name, discover)  # check NAME before anything else
    if folder is None:
        paths = current().settings.handler_paths
        if not paths:
            raise ConfigError("no handler folder: set CRONJOBS_HANDLER_PATHS (or handler_paths "
                              "in cronjobs.toml), or pass --folder DIR")
        folder = paths[0]
    for path in write(folder, contents):
        click.echo(f"wrote {path}")
    ini = write_pytest_ini(folder)  # the tests run the same inside a checkout or outside
    if ini is not None:
        click.echo(f"wrote {ini}")
    test = next(p for p in contents if p.startswith("test_"))
    click.echo(f"next: cronjobs list-handlers; python -m pytest {folder}/{test}")
    if not _have_pytest():
        import sys  # lazy: CLI start-up time

        click.echo(f"pytest is not installed in this venv ({sys.prefix}): pip install pytest "
                   f"(the extra 'cronjobs[testing]' of a wheel brings it too)")


def _have_pytest() -> bool:
    from importlib.util import find_spec  # lazy: CLI start-up time

    try:
        return find_spec("pytest") is not None
    except (ImportError, ValueError):  # a module blocked in sys.modules
        return False
