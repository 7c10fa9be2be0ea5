"""Where settings come from: the `CRONJOBS_*` variables and the TOML file (`cronjobs.toml`
in the working folder, or the file named by `CRONJOBS_CONFIG`). An unknown variable or key
is an error with a "did you mean" hint."""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError

ENV_PREFIX = "CRONJOBS_"


def read_sources(environ: Mapping[str, str], fields: list[str],
                 task_keys: list[str]) -> dict[str, Any]:
    """The raw values of the TOML file, then of the variables (which win), by field name.

    Args:
        environ: the variables to read.
        fields: the settings' field names (`Settings.model_fields`).
        task_keys: the keys of a `[tasks.<task>]` table.

    Raises:
        ConfigError: `CRONJOBS_CONFIG` names no file; the file cannot be read or parsed; an
            unknown variable or key (with a "did you mean" hint).
    """
    values: dict[str, Any] = {}
    config_path = environ.get(ENV_PREFIX + "CONFIG")
    path = Path(config_path) if config_path else Path("cronjobs.toml")
    if config_path and not path.is_file():
        raise ConfigError(f"CRONJOBS_CONFIG names a file that does not exist: {config_path!r}")
    if path.is_file():
        values.update(_read_toml(path, fields, task_keys))
    values.update(_read_env(environ, fields))
    return values


def did_you_mean(name: str, choices: list[str]) -> str:
    """` (did you mean X?)` for the choice closest to `name`, or an empty string."""
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_key(error: Mapping[str, Any], tables: Mapping[str, Any]) -> str | None:
    """The message of a validation error for an unknown key in a setting made of tables
    (`queues.<name>`, `tasks.<task>`, `uptime_checks[n]`): the key, a "did you mean" hint
    and the keys there are. None for any other error.

    Args:
        error: one of pydantic's `ValidationError.errors()`.
        tables: setting name -> the pydantic model of its tables.
    """
    loc = error.get("loc") or ()
    table = tables.get(str(loc[0])) if loc else None
    if error.get("type") != "extra_forbidden" or table is None:
        return None
    key, known = str(loc[-1]), list(table.model_fields)
    return f"unknown key {key!r}{did_you_mean(key, known)}; the keys are {', '.join(known)}"


def _read_env(environ: Mapping[str, str], fields: list[str]) -> dict[str, Any]:
    env_names = [ENV_PREFIX + f.upper() for f in fields if f != "tasks"] + [ENV_PREFIX + "CONFIG"]
    values: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        if key not in env_names:
            raise ConfigError(f"unknown variable {key}{did_you_mean(key, env_names)}; every "
                              f"{ENV_PREFIX}* name is a cronjobs setting (a handler's own "
                              f"settings need a prefix of their own)")
        if key != ENV_PREFIX + "CONFIG":
            values[key[len(ENV_PREFIX):].lower()] = value
    return values


def _read_toml(path: Path, fields: list[str], task_keys: list[str]) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    for key in data:
        if key not in fields:
            raise ConfigError(f"unknown key {key!r} in {path}{did_you_mean(key, fields)}")
    for table_key in ("queues",):
        if not isinstance(data.get(table_key, {}), dict):
            raise ConfigError(f"{table_key!r} in {path} must be a table of [{table_key}.<name>] "
                              f"tables, got {data[table_key]!r}")
    if not isinstance(data.get("tasks", {}), dict):
        raise ConfigError(f"'tasks' in {path} must be a table of [tasks.<task>] tables, "
                          f"got {data['tasks']!r}")
    for task, table in (data.get("tasks") or {}).items():
        if not isinstance(table, dict):
            raise ConfigError(f"[tasks.{task}] in {path} must be a table, got {table!r}")
        for key in table:
            if key not in task_keys:
                raise ConfigError(
                    f"unknown key {key!r} in [tasks.{task}] of {path}"
                    f"{did_you_mean(key, task_keys)}; the keys are {', '.join(task_keys)}")
    return data
