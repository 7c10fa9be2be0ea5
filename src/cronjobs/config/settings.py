"""`Settings`: every cronjobs setting with its default, bounds and description, its
validators, and `Settings.load()` (the TOML file, the variables and the CLI's overrides).

The configuration reference (docs/reference/configuration.md) is generated from the fields
here, in their order (`scripts/gen_reference.py`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ..errors import ConfigError, InvalidJob
from ..limits import check_queue
from .sources import read_sources, unknown_key
from .tables import QueueSettings, TaskSettings, UptimeCheck
from .urls import (
    MEMORY_BROKER,
    check_broker_url,
    check_database_url,
    check_http_url,
    hide_password,
)

# The settings that are tables of a model: an unknown key in one gets a "did you mean".
_TABLES = {"queues": QueueSettings, "tasks": TaskSettings, "uptime_checks": UptimeCheck}


class Settings(BaseModel):
    """All cronjobs settings. Build with `Settings.load()`; construct directly in tests.

    Durations carry their unit in the field name (`_seconds`, `_minutes`, `_days`).
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
                    "`minute`/`hour`/`day`/`month` slots are always UTC.")
    default_queue: str = Field(
        "default", description="Broker queue of handlers that set no `QUEUE`.")
    remote_types: tuple[str, ...] = Field(
        (),
        description="Job types that another codebase's workers run, so this one may dispatch "
                    "them without a handler of its own: fnmatch patterns such as `billing.*`, "
                    "comma-separated in the variable, a list in TOML. Any other type without "
                    "a registered handler is refused at dispatch (`InvalidJob`).")
    # -- web front ------------------------------------------------------------------
    dashboard_token: str | None = Field(
        None,
        description="Token required as `Authorization: Bearer` (or to log in) on every page "
                    "but `/health`. Unset: on loopback the dashboard prints a token generated "
                    "once and kept in the database; on any other address it refuses to start.")
    dashboard_host: str = Field(
        "127.0.0.1", description="Address `cronjobs serve` listens on.")
    dashboard_port: int = Field(
        default=8080, ge=0, le=65535,
        description="Port `cronjobs serve` listens on (0 picks a free one).")
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
                    "children) this long after they finished (days).")
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
    # -- built-in handlers: http-uptime, tls-certexpiry, db-backup ----------------------
    uptime_urls: tuple[str, ...] = Field(
        (),
        description="URLs the `http-uptime` task checks every minute (http:// or https://, "
                    "with a host); comma-separated in the variable, a list in TOML. "
                    "`cronjobs serve` checks its own `/health` when "
                    "neither this nor `uptime_checks` is set.")
    uptime_expect: str | None = Field(
        None, description="Text every page of `uptime_urls` must contain.")
    uptime_expect_status: int | None = Field(
        None, ge=100, le=599,
        description="HTTP status every URL of `uptime_urls` must answer with; unset means any "
                    "2xx. A 3xx is checked without following the redirect.")
    uptime_checks: tuple[UptimeCheck, ...] = Field(
        (),
        description="Checks with their own expectations, checked besides `uptime_urls`: "
                    "`[[uptime_checks]]` tables with `url`, `expect_status`, `expect_text` in "
                    "TOML; a JSON list of such objects in the variable.")
    uptime_timeout_seconds: float = Field(
        default=10, gt=0, description="Time limit of one uptime request (seconds).")
    tls_hosts: tuple[str, ...] = Field(
        (),
        description="Hosts whose TLS certificate the `tls-certexpiry` task checks daily, as "
                    "`host` or `host:port` (port 443 by default); comma-separated in the "
                    "variable, a list in TOML.")
    tls_threshold_days: float = Field(
        default=14, ge=0,
        description="A certificate that expires in fewer days than this fails its check "
                    "(days).")
    tls_timeout_seconds: float = Field(
        default=10, gt=0,
        description="Time limit to connect and finish the TLS handshake (seconds).")
    tls_ca_file: str | None = Field(
        None,
        description="PEM file of extra certificate authorities to trust (an internal CA), "
                    "besides the system's.")
    tls_verify: bool = Field(
        True,
        description="When true, a certificate that does not verify (unknown issuer, wrong "
                    "name, expired) fails its check; when false only the expiry counts.")
    backup_dir: str = Field(
        "backups",
        description="Folder the `db-backup` task writes backups to (created when missing; "
                    "relative to the worker's working folder).")
    backup_keep: int = Field(
        default=7, ge=1,
        description="`db-backup` keeps this many newest backups of the database and deletes "
                    "older ones (files).")
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

    # -- dashboard ------------------------------------------------------------------------
    dashboard_session_hours: float = Field(
        default=12, gt=0, description="How long a dashboard login lasts (hours).")
    dashboard_secure_cookie: bool = Field(
        default=False, description="Always mark the session cookie Secure (it is Secure "
                                   "anyway on a request that came over HTTPS).")
    dashboard_proxy: int = Field(
        default=0, ge=0, le=10,
        description="Reverse proxies in front of the dashboard whose X-Forwarded-For, "
                    "-Proto, -Host and -Prefix headers are trusted (Werkzeug's ProxyFix): 1 "
                    "behind one nginx serving it under a prefix such as `/cronjobs/`; 0 "
                    "ignores those headers.")
    metrics_public: bool = Field(
        default=False, description="Serve /metrics without the dashboard token.")
    dashboard_db_timeout_seconds: float = Field(
        default=5, gt=0, le=60,
        description="The dashboard's database budget: waiting for one of its connections, "
                    "connecting, one statement and one lock wait each end after this long, "
                    "and the page answers 503 (seconds).")

    # -- health ---------------------------------------------------------------------------
    health_timeout_seconds: float = Field(
        default=3, gt=0, le=60,
        description="A health report answers within this many seconds; a check still "
                    "running then (hung database or broker) is reported as fail; the "
                    "checks' statements, lock waits and connects end a second later (seconds).")
    health_cache_seconds: float = Field(
        default=2, ge=0, le=60,
        description="`/health` and `/health/ready` serve one report to every caller for "
                    "this long after it is made; one run at a time regardless (seconds).")
    health_stuck_seconds: float = Field(
        default=300, gt=0,
        description="Due rows older than this in a queue that has live workers: the "
                    "workers have stopped taking rows (seconds).")
    health_pause_warn_seconds: float = Field(
        default=3600, gt=0,
        description="Warn about a pause (of a queue, type or task) older than this; one "
                    "left on by mistake stops work silently (seconds).")
    health_held_warn_seconds: float = Field(
        default=900, gt=0,
        description="Warn when a due row has waited longer than this behind a block or a "
                    "full concurrency limit (seconds).")
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

    # -- alerts: the built-in health task sends to every channel configured here --
    alert_repeat_minutes: float = Field(
        default=60, gt=0, description="Alert again about a problem still open (or flapping) "
                                      "after this long (minutes).")
    alert_after_runs: int = Field(
        default=2, ge=1, description="Alert about a problem seen failing in this many health "
                                     "runs in a row (runs; 1 alerts at the first).")
    alert_recover_after_runs: int = Field(
        default=2, ge=1, description="Send the recovery of an alerted problem after this many "
                                     "passing health runs in a row (runs).")
    alert_flap_changes: int = Field(
        default=3, ge=2, description="A problem whose state (failing/passing) changed this many "
                                     "times within alert_flap_window_minutes is flapping "
                                     "(changes).")
    alert_flap_window_minutes: float = Field(
        default=60, gt=0, description="The window in which state changes are counted for "
                                      "flapping (minutes).")
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

    @field_validator("uptime_urls", "tls_hosts", "alert_smtp_to", "remote_types", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(u.strip() for u in value.split(",") if u.strip())
        return value

    @field_validator("uptime_urls")
    @classmethod
    def _check_uptime_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_http_url(u) for u in value)

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

    @field_validator("uptime_checks", mode="before")
    @classmethod
    def _parse_checks(cls, value: Any) -> Any:
        if isinstance(value, str):  # from the environment: a JSON list of tables
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of {{\"url\": ...}} objects "
                                 f"({exc.msg})") from None
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
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

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
                TOML file, or a value that fails validation (naming field and value).
        """
        environ = os.environ if environ is None else environ
        values = read_sources(environ, list(cls.model_fields), list(TaskSettings.model_fields))
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            err = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")  # a typo first
            field = ".".join(str(p) for p in err["loc"])
            message = unknown_key(err, _TABLES) or err["msg"].removeprefix("Value error, ")
            shown = err.get("input")
            if field in ("database_url", "broker_url") and isinstance(shown, str):
                shown = hide_password(shown)  # the message must not print a password
            raise ConfigError(f"invalid setting {field}={shown!r}: {message}") from None
