"""Settings: one typed object built at the edge from `CRONJOBS_*` variables and `cronjobs.toml`.

Environment variables win over the TOML file. Unknown variables and keys are errors with a
"did you mean" hint, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from .errors import ConfigError

ENV_PREFIX = "CRONJOBS_"
MEMORY_BROKER = "memory://"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
AMQP_SCHEMES = ("amqp://", "amqps://")


class TaskSettings(BaseModel):
    """Operator settings of one task (`[tasks.<task>]` in the TOML file).

    Attributes:
        enabled: initial kill-switch state for a task seen for the first time
            (the dashboard/CLI switch in `cronjob_runtime.enabled` wins afterwards).
        frequency: `minute`, `hour`, `day`, `month` or a 5-field cron expression,
            overriding the handler's `FREQUENCY`.
    """

    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool | None = None
    frequency: str | None = None

    @field_validator("frequency")
    @classmethod
    def _check_frequency(cls, value: str | None) -> str | None:
        # Checked here: a bad override would otherwise make every tick raise.
        from .slots import check_frequency

        if value is not None:
            check_frequency(value)
        return value


class Settings(BaseModel):
    """All cronjobs settings. Build with `Settings.load()`; construct directly in tests.

    Durations carry their unit in the field name (`_seconds`, `_minutes`, `_days`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    database_url: str = "sqlite:///cronjobs.db"
    broker_url: str = MEMORY_BROKER
    broker_namespace: str = "cronjobs"
    handler_paths: tuple[str, ...] = ()
    timezone: str = "UTC"
    dashboard_token: str | None = None
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = Field(default=8080, ge=0, le=65535)
    default_queue: str = "default"
    retry_backoff_cap_minutes: float = Field(default=60, gt=0)
    lease_grace_seconds: float = Field(default=30, ge=0)
    lease_renew_seconds: float = Field(default=10, gt=0)
    sweep_interval_seconds: float = Field(default=15, gt=0)
    sweep_after_seconds: float = Field(default=30, ge=0)
    recover_stale_minutes: float = Field(default=5, ge=0)
    retention_completed_days: float = Field(default=7, ge=0)
    retention_failed_days: float = Field(default=30, ge=0)
    retention_cancelled_days: float = Field(default=7, ge=0)
    cleanup_batch_size: int = Field(default=1000, gt=0)
    uptime_urls: tuple[str, ...] = ()
    uptime_expect: str | None = None
    uptime_timeout_seconds: float = Field(default=10, gt=0)
    log_level: str = "INFO"
    log_dir: str | None = None
    tasks: dict[str, TaskSettings] = Field(default_factory=dict)

    # -- dashboard (issue 7) ----------------------------------------------------------------
    dashboard_session_hours: float = Field(
        default=12, gt=0, description="How long a dashboard login lasts (hours).")
    dashboard_secure_cookie: bool = Field(
        default=False, description="Mark the session cookie Secure (set it behind HTTPS).")
    metrics_public: bool = Field(
        default=False, description="Serve /metrics without the dashboard token.")

    # -- health (issue 7) -------------------------------------------------------------------
    health_timeout_seconds: float = Field(
        default=3, gt=0, le=60,
        description="A health report answers within this many seconds; a check still "
                    "running then (hung database or broker) is reported as fail (seconds).")
    health_stuck_seconds: float = Field(
        default=300, gt=0,
        description="Due rows older than this in a queue that has live workers: the "
                    "workers have stopped taking rows (seconds).")
    health_failed_warn_per_hour: int = Field(
        default=10, ge=1, description="Warn when this many rows failed in the last hour (rows).")
    health_disk_warn_percent: float = Field(default=90, gt=0, le=100,
                                            description="Disk use that warns (percent).")
    health_disk_fail_percent: float = Field(default=97, gt=0, le=100,
                                            description="Disk use that fails (percent).")
    health_memory_warn_percent: float = Field(default=90, gt=0, le=100,
                                              description="Memory use that warns (percent).")
    health_memory_fail_percent: float = Field(default=97, gt=0, le=100,
                                              description="Memory use that fails (percent).")

    # -- alerts (issue 7): the built-in health task sends to every channel configured here --
    alert_repeat_minutes: float = Field(
        default=60, gt=0, description="Alert again about a problem still open after this long (minutes).")
    alert_timeout_seconds: float = Field(
        default=10, gt=0, description="Timeout of one notification (seconds).")
    alert_webhook_url: str | None = Field(
        default=None, description="POST a JSON alert to this URL (http:// or https://).")
    alert_telegram_bot_token: str | None = Field(
        default=None, description="Telegram bot token (with alert_telegram_chat_id).")
    alert_telegram_chat_id: str | None = Field(default=None, description="Telegram chat id.")
    alert_telegram_api_url: str = Field(
        default="https://api.telegram.org", description="Telegram Bot API base URL.")
    alert_smtp_host: str | None = Field(default=None, description="SMTP server host.")
    alert_smtp_port: int = Field(default=25, ge=1, le=65535, description="SMTP server port.")
    alert_smtp_starttls: bool = Field(default=False, description="Use STARTTLS.")
    alert_smtp_username: str | None = Field(default=None, description="SMTP login.")
    alert_smtp_password: str | None = Field(default=None, description="SMTP password.")
    alert_smtp_from: str = Field(default="cronjobs@localhost", description="From address.")
    alert_smtp_to: tuple[str, ...] = Field(
        default=(), description="Recipients, comma-separated in the environment.")

    @field_validator("handler_paths", mode="before")
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(p for p in value.split(os.pathsep) if p)
        return value

    @field_validator("uptime_urls", "alert_smtp_to", mode="before")
    @classmethod
    def _split_urls(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(u.strip() for u in value.split(",") if u.strip())
        return value

    @field_validator("broker_url")
    @classmethod
    def _check_broker(cls, value: str) -> str:
        if not value.startswith((MEMORY_BROKER, *REDIS_SCHEMES, *AMQP_SCHEMES)):
            raise ValueError(f"unsupported broker URL {value!r}: use memory://, redis://... "
                             f"or amqp://...")
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database(cls, value: str) -> str:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(value)
        except ArgumentError:
            raise ValueError(f"not a database URL: {value!r} (e.g. sqlite:///cronjobs.db, "
                             f"mysql+pymysql://user:pw@host/db)") from None
        return value

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    @property
    def embedded_broker(self) -> bool:
        """True when the broker is the in-process one (`memory://`)."""
        return self.broker_url == MEMORY_BROKER

    def task(self, name: str) -> TaskSettings:
        """Return the operator settings of task `name` (empty settings if none)."""
        return self.tasks.get(name, TaskSettings())

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        """Build settings from the TOML file, the environment and keyword overrides.

        Args:
            environ: variables to read (default `os.environ`).
            **overrides: field values that win over both sources (used by the CLI).

        Returns:
            The validated settings.

        Raises:
            ConfigError: unknown variable or key (with a "did you mean" hint), unreadable
                TOML file, or a value that fails validation (naming field and value).
        """
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        config_path = environ.get(ENV_PREFIX + "CONFIG")
        path = Path(config_path) if config_path else Path("cronjobs.toml")
        if config_path and not path.is_file():
            raise ConfigError(f"CRONJOBS_CONFIG names a file that does not exist: {config_path!r}")
        if path.is_file():
            values.update(_read_toml(path))
        values.update(_read_env(environ))
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            raise ConfigError(f"invalid setting {field}={err.get('input')!r}: {message}") from None


def _known_fields() -> list[str]:
    return list(Settings.model_fields)


def _hint(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    fields = _known_fields()
    env_names = [ENV_PREFIX + f.upper() for f in fields if f != "tasks"] + [ENV_PREFIX + "CONFIG"]
    values: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        if key not in env_names:
            raise ConfigError(f"unknown variable {key}{_hint(key, env_names)}")
        if key != ENV_PREFIX + "CONFIG":
            values[key[len(ENV_PREFIX):].lower()] = value
    return values


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    fields = _known_fields()
    for key in data:
        if key not in fields:
            raise ConfigError(f"unknown key {key!r} in {path}{_hint(key, fields)}")
    task_keys = list(TaskSettings.model_fields)
    if not isinstance(data.get("tasks", {}), dict):
        raise ConfigError(f"'tasks' in {path} must be a table of [tasks.<task>] tables, "
                          f"got {data['tasks']!r}")
    for task, table in (data.get("tasks") or {}).items():
        if not isinstance(table, dict):
            raise ConfigError(f"[tasks.{task}] in {path} must be a table, got {table!r}")
        for key in table:
            if key not in task_keys:
                raise ConfigError(
                    f"unknown key {key!r} in [tasks.{task}] of {path}{_hint(key, task_keys)}"
                )
    return data
