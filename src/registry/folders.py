"""The handler files of a folder named in `CRONJOBS_HANDLER_PATHS`, imported one by one
for a `registry.HandlerRegistry` (which registers each module's classes as it comes)."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from cronjobs.errors import HandlerError

log = logging.getLogger("cronjobs.registry")


def import_folder(folder: Path, broken: dict[str, str] | None = None
                  ) -> Iterator[tuple[ModuleType, str]]:
    """Import every `*.py` file of `folder` (not `_*.py`, not a test file), in name order,
    each as the module `cronjobs_ext_<folder hash>_<stem>`; yields `(module, its path)`
    one file at a time.

    Args:
        folder: the folder (a `Path`, relative or absolute).
        broken: None: a file that does not import raises. A dict: such a file is skipped
            and its error stored under its path: the `HandlerError` line, then the
            traceback (a job process of a fork server started after the file was broken:
            the other files' handlers still run).

    Raises:
        HandlerError: the folder does not exist, or a file does not import (no `broken`),
            naming the file and the error on one line.
    """
    if not folder.is_dir():
        raise HandlerError(f"handler folder {str(folder)!r} (CRONJOBS_HANDLER_PATHS) "
                           f"does not exist")
    tag = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:8]
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_") or is_test_file(path.name):
            log.debug("skipping %s: private or test file", path)
            continue
        name = f"cronjobs_ext_{tag}_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            error = f"cannot load handler file {path}: {one_line(exc)}"
            if broken is None:
                raise HandlerError(error) from None
            broken[str(path)] = error + "\n" + "".join(traceback.format_exception(exc))
            continue
        yield module, str(path)


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message` of `exc` (a SyntaxError: its message and line)."""
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def is_test_file(name: str) -> bool:
    """pytest's file names (`test_*.py`, `*_test.py`, `conftest.py`): tests may sit next to
    the handlers they test (`cronjobs new-handler` puts them there) without being loaded."""
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
