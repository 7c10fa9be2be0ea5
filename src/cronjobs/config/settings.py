"""`Settings`: every cronjobs setting with its default, bounds and description, its
validators, and `Settings.load()` (the TOML file, the variables and the CLI's overrides).

The configuration reference (docs/reference/configuration.md) is generated from the fields
here and from the sections' (`sections.py`), in their order (`scripts/gen_reference.py`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..errors import ConfigError, InvalidJob
from ..limits import check_queue
from ..schedule.slots import check_zone
from .sections import (
    SECTIONS,
    AlertSettings,
    BackupSettings,
    DashboardSettings,
    HealthSettings,
    TlsSettings,
    UptimeSettings,
    WebhookSettings,
    split_commas,
)
from .sources import read_sources, unknown_key
from .tables import QueueSettings, TaskSettings, UptimeCheck
from .urls import MEMORY_BROKER, check_broker_url, check_database_url, hide_password

# The settings that are tables of a model: an unknown key in one gets a "did you mean".
_TABLES = {"queues": QueueSettings, "tasks": TaskSettings, "uptime_checks": UptimeCheck}


class Settings(BaseModel):
    """All cronjobs settings. Build with `Settings.load()`; construct directly in tests.

    The engine's settings are fields of their own (`settings.database_url`); the
    dashboard's, the built-in handlers', the health report's and the alerts' are sections
    (`settings.alerts.smtp_to`, `sections.py`). Every setting has one flat key, the name the
    TOML file and the variables use (`alert_smtp_to`, `CRONJOBS_ALERT_SMTP_TO`), and the
    constructor takes it too: `Settings(alert_smtp_to=("ops@example.com",))` and
    `Settings(alerts={"smtp_to": ...})` are the same settings.

    Durations carry their unit in the name (`_seconds`, `_minutes`, `_days`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- where the data and the messages live ------------------------------------------
    database_url: str = Field(
        "sqlite:///cronjobs.db",
        description="SQLAlchemy URL of the database that holds the queue: "
                    "`sqlite:///cronjobs.db`, `mysql+pymysql://user:pw@host/db?charset=utf8mb4`, "
                    "`postgresql+psycopg://user:pw@host/db`.")
    broker_url: str = Field(
        MEMORY_BROKER,
        description="Where messages (row ids) travel: `memory://` (in-process, the embedded "
                    "mode), `redis://host:6379/0`, `amqp://user:pw@host:5672/vhost`.")
    broker_namespace: str = Field(
        "cronjobs",
        description="Prefix of every Redis key, so several systems can share one Redis.")
    handler_paths: tuple[str, ...] = Field(
        (),
        description="Extra handler folders (every `*.py` file not starting with `_` or "
                    "`test_` is loaded); separated by `:` in the variable, a list in TOML. "
                    "`cronjobs new-handler` writes into the first.")
    timezone: str = Field(
        "UTC",
        description="IANA time zone of cron expressions and macros (`@daily` ...); "
                    "`minute`/`hour`/`day`/`month` slots are always UTC. A task's own zone "
                    "(the handler's TIMEZONE, `[tasks.x] timezone`) wins.")
    default_queue: str = Field(
        "default", description="Broker queue of handlers that set no `QUEUE`.")
    remote_types: tuple[str, ...] = Field(
        (),
        description="Job types that another codebase's workers run, so this one may dispatch "
                    "them without a handler of its own: fnmatch patterns such as `billing.*`, "
                    "comma-separated in the variable, a list in TOML. Any other type without "
                    "a registered handler is refused at dispatch (`InvalidJob`).")
    # -- queue and worker -------------------------------------------------------------
    retry_backoff_cap_minutes: float = Field(
        default=60, gt=0,
        description="Cap of the retry backoff: attempt n+1 waits 2^n minutes, at most this "
                    "(minutes).")
    lease_grace_seconds: float = Field(
        default=30, ge=0,
        description="A running row's lease is its MAX_RUNTIME plus this; keep above 2 s (seconds).")
    lease_renew_seconds: float = Field(
        default=10, gt=0,
        description="How often a worker renews the leases of the rows it runs (seconds).")
    claim_ahead_per_slot: int = Field(
        default=2, ge=0, le=64,
        description="Rows a worker claims ahead per slot (0 to 64; 0: none) while a backlog of "
                    "jobs under 0.1 s waits; they start as slots free, or go back after 1 s.")
    job_process_idle_seconds: float = Field(
        default=60, ge=0,
        description="A worker's job process that has had no job for this long ends, and "
                    "so does the fork server once no job process has lived for as long; the "
                    "next row starts them again (0: a job process ends after each job) "
                    "(seconds).")
    sweep_interval_seconds: float = Field(
        default=15, gt=0,
        description="How often each worker looks for due pending rows whose message was "
                    "lost (seconds).")
    sweep_after_seconds: float = Field(
        default=30, ge=0,
        description="A due pending row is sent to the broker again after waiting this long "
                    "(seconds).")
    recover_stale_minutes: float = Field(
        default=5, ge=0,
        description="A running row whose lease expired this long ago goes back to pending, "
                    "or to failed when no attempt is left (minutes).")
    retention_completed_days: float = Field(
        default=7, ge=0,
        description="`cleanup` deletes completed rows this long after they finished; their "
                    "idempotency keys stay taken until then (days).")
    retention_failed_days: float = Field(
        default=30, ge=0,
        description="`cleanup` deletes failed rows this long after they finished (days).")
    retention_cancelled_days: float = Field(
        default=7, ge=0,
        description="`cleanup` deletes cancelled rows (those kept because they have "
                    "children) and expired ones (never started by their deadline; counted "
                    "as cancelled) this long after they finished (days).")
    cleanup_batch_size: int = Field(
        default=1000, gt=0,
        description="Rows deleted per statement by `cleanup`, so a large table is never "
                    "locked for long (rows).")
    unknown_type_grace_seconds: float = Field(
        default=900, ge=0,
        description="A worker that has no handler for a row's type puts the row back (no "
                    "attempt used, delay doubling from 5 s to 5 min) for a worker that knows "
                    "it, and fails it with 'no handler' after this long (seconds).")
    log_level: str = Field(
        "INFO", description="Log level of every process: DEBUG, INFO, WARNING, ERROR.")
    log_dir: str | None = Field(
        None,
        description="When set, workers also log to `DIR/workers-YYYY-MM-DD.log` (UTC date).")
    # -- operator settings per task -----------------------------------------------------
    tasks: dict[str, TaskSettings] = Field(
        default_factory=dict,
        description="Per-task settings, `[tasks.<task>]` tables in TOML with `enabled` and "
                    "`frequency` (no variable).")

    queues: dict[str, QueueSettings] = Field(
        default_factory=dict,
        description="Per-queue limits, `[queues.<queue>]` tables in TOML with `concurrency` and "
                    "`rate_limit` (`30/s`, `100/m`, `5/h`); in the environment a JSON object: "
                    "`{\"broadcast\": {\"concurrency\": 1}}`.")

    # -- the sections: settings.<section>.<name>, flat keys <prefix>_<name> ----------------
    dashboard: DashboardSettings = Field(
        default_factory=DashboardSettings,
        description="The dashboard: address, token, login session, proxies, database budget.")
    uptime: UptimeSettings = Field(
        default_factory=UptimeSettings,
        description="The `http-uptime` task: its URLs and what they must answer.")
    tls: TlsSettings = Field(
        default_factory=TlsSettings,
        description="The `tls-certexpiry` task: its hosts and when a certificate fails.")
    backup: BackupSettings = Field(
        default_factory=BackupSettings,
        description="The `db-backup` task: its folder and how many backups it keeps.")
    health: HealthSettings = Field(
        default_factory=HealthSettings,
        description="The health report: its time budget and the thresholds of its checks.")
    alerts: AlertSettings = Field(
        default_factory=AlertSettings,
        description="The health task's alerts: when they are sent, and their channels.")
    webhooks: WebhookSettings = Field(
        default_factory=WebhookSettings,
        description="Signed webhooks: their secret and retries.")

    @field_validator("handler_paths", mode="before")
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(p for p in value.split(os.pathsep) if p)
        return value

    @field_validator("remote_types", mode="before")
    @classmethod
    def _split_types(cls, value: Any) -> Any:
        return split_commas(value)

    @field_validator("queues", mode="before")
    @classmethod
    def _parse_queues(cls, value: Any) -> Any:
        if isinstance(value, str):  # from the environment: a JSON object of tables
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"must be a JSON object of queue tables: {exc}") from None
        if isinstance(value, dict):
            for queue in value:
                try:
                    check_queue(queue)
                except InvalidJob as exc:
                    raise ValueError(str(exc)) from None
        return value

    @field_validator("broker_url", "database_url")
    @classmethod
    def _check_url(cls, value: str, info: ValidationInfo) -> str:
        return (check_broker_url if info.field_name == "broker_url" else check_database_url)(value)

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        names = logging.getLevelNamesMapping()
        if not isinstance(value, str) or value.strip().upper() not in names:
            raise ValueError(f"unknown log level {value!r} (DEBUG, INFO, WARNING, ERROR or "
                             f"CRITICAL)")
        return value.strip().upper()

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        try:
            return check_zone(value)
        except ValueError as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc

    @model_validator(mode="before")
    @classmethod
    def _fold_flat_keys(cls, data: Any) -> Any:
        # A section's flat keys (`alert_smtp_to`, as the file and the variables say them)
        # into its table (`alerts`), merged over a section given whole.
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name, section in SECTIONS.items():
            flat = {key: data.pop(key) for key in section.keys() if key in data}
            given = data.get(name, {})  # a dict even when empty: validated within this schema
            if flat and isinstance(given, BaseModel):
                given = given.model_dump(by_alias=True, exclude_unset=True)
            data[name] = {**given, **flat} if flat and isinstance(given, dict) else given
        return data

    @classmethod
    def keys(cls) -> list[str]:
        """Return every flat key, as the TOML file says it (a variable is `CRONJOBS_` + the
        key in capitals): the top-level fields', then each section's (`alert_smtp_to`), in
        the configuration reference's order."""
        top = [name for name in cls.model_fields if name not in SECTIONS]
        return top + [key for section in SECTIONS.values() for key in section.keys()]

    @property
    def embedded_broker(self) -> bool:
        """True when the broker is the in-process one (`memory://`)."""
        return self.broker_url == MEMORY_BROKER

    def queue_settings(self, name: str) -> QueueSettings:
        """Return the operator limits of queue `name` (no limits if none)."""
        return self.queues.get(name, QueueSettings())

    def task(self, name: str) -> TaskSettings:
        """Return the operator settings of task `name` (empty settings if none)."""
        return self.tasks.get(name, TaskSettings())

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from the TOML file, the environment and keyword overrides.

        Args:
            environ: variables to read (default `os.environ`).
            **overrides: field values that win over both sources (used by the CLI).

        Returns:
            The validated settings.

        Raises:
            ConfigError: unknown variable or key (with a "did you mean" hint), unreadable
                TOML file, or a value that fails validation (naming its key, e.g.
                `alert_smtp_port`, and the value).
        """
        environ = os.environ if environ is None else environ
        values = read_sources(environ, cls.keys(), list(TaskSettings.model_fields))
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            err = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")  # a typo first
            err = {**err, "loc": flat_loc(err["loc"])}
            field = ".".join(str(p) for p in err["loc"])
            message = unknown_key(err, _TABLES) or err["msg"].removeprefix("Value error, ")
            shown = err.get("input")
            if field in ("database_url", "broker_url") and isinstance(shown, str):
                shown = hide_password(shown)  # the message must not print a password
            if field == "webhook_secret" and shown is not None:
                shown = "***"  # nor the webhook secret
            raise ConfigError(f"invalid setting {field}={shown!r}: {message}") from None


def flat_loc(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """The place of a validation error as the file and the variables name it: a section's
    field by its flat key (`("alerts", "smtp_port")` -> `("alert_smtp_port",)`; a place
    inside it follows: `("uptime_checks", 0, "url")`); any other place unchanged."""
    section = SECTIONS.get(str(loc[0])) if len(loc) > 1 else None
    if section is None:
        return loc
    field = section.model_fields.get(str(loc[1]))
    return ((field.alias if field is not None and field.alias else loc[1]), *loc[2:])
