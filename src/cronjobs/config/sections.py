"""The settings' sections: one model per concern that is not the engine's own (the
dashboard, the built-in handlers `http-uptime`, `tls-certexpiry` and `db-backup`, the
health report and its alerts), read as `settings.<section>.<name>`.

A section keeps the flat key of each of its fields, the field's alias (`PREFIX` + its
name, e.g. `alert_` + `smtp_to`): that key is what the TOML file and the variables
(`CRONJOBS_ALERT_SMTP_TO`) say, and what an error names; `Settings` folds flat keys into
their section (`Settings(alert_smtp_to=...)` keeps working).
"""

# No `from __future__ import annotations` here: pydantic would evaluate each field's type
# from its text when the classes are made, at every CLI command's start.
import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .tables import UptimeCheck
from .urls import check_http_url


def split_commas(value: Any) -> Any:
    """A comma-separated string (from a variable) as a tuple of its stripped, non-empty
    items; any other value (a TOML list) unchanged, for the field's own validation."""
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


def _config(prefix: str) -> ConfigDict:
    # defer_build: `Settings` validates a section as a part of its own schema; a section's
    # own validator is built only if a section is made alone (`AlertSettings(...)`).
    return ConfigDict(extra="forbid", frozen=True, alias_generator=lambda name: prefix + name,
                      validate_by_name=True, validate_by_alias=True, defer_build=True)


class Section(BaseModel):
    """Base of a settings section. `PREFIX` + a field's name is its flat key (its alias),
    unless the field sets another alias (`metrics_public`)."""

    PREFIX: ClassVar[str] = ""

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Return flat key -> field name, in field order (`{"alert_smtp_to": "smtp_to", ...}`)."""
        return {field.alias or name: name for name, field in cls.model_fields.items()}


class DashboardSettings(Section):
    """The dashboard of `cronjobs serve` and `cronjobs dashboard`: where it listens, its
    token and login session, the proxies in front of it, its database budget."""

    PREFIX: ClassVar[str] = "dashboard_"
    model_config = _config(PREFIX)

    token: str | None = Field(
        None,
        description="Token required as `Authorization: Bearer` (or to log in) on every page "
                    "but `/health`. Unset: on loopback the dashboard prints a token generated "
                    "once and kept in the database; on any other address it refuses to start.")
    host: str = Field("127.0.0.1", description="Address `cronjobs serve` listens on.")
    port: int = Field(
        default=8080, ge=0, le=65535,
        description="Port `cronjobs serve` listens on (0 picks a free one).")
    session_hours: float = Field(
        default=12, gt=0, description="How long a dashboard login lasts (hours).")
    secure_cookie: bool = Field(
        default=False, description="Always mark the session cookie Secure (it is Secure "
                                   "anyway on a request that came over HTTPS).")
    proxy: int = Field(
        default=0, ge=0, le=10,
        description="Reverse proxies in front of the dashboard whose X-Forwarded-For, "
                    "-Proto, -Host and -Prefix headers are trusted (Werkzeug's ProxyFix): 1 "
                    "behind one nginx serving it under a prefix such as `/cronjobs/`; 0 "
                    "ignores those headers.")
    metrics_public: bool = Field(
        default=False, alias="metrics_public",
        description="Serve /metrics without the dashboard token.")
    db_timeout_seconds: float = Field(
        default=5, gt=0, le=60,
        description="The dashboard's database budget: waiting for one of its connections, "
                    "connecting, one statement and one lock wait each end after this long, "
                    "and the page answers 503 (seconds).")


class UptimeSettings(Section):
    """The `http-uptime` task: the URLs it checks every minute and what they must answer."""

    PREFIX: ClassVar[str] = "uptime_"
    model_config = _config(PREFIX)

    urls: tuple[str, ...] = Field(
        (),
        description="URLs the `http-uptime` task checks every minute (http:// or https://, "
                    "with a host); comma-separated in the variable, a list in TOML. "
                    "`cronjobs serve` checks its own `/health` when "
                    "neither this nor `uptime_checks` is set.")
    expect: str | None = Field(
        None, description="Text every page of `uptime_urls` must contain.")
    expect_status: int | None = Field(
        None, ge=100, le=599,
        description="HTTP status every URL of `uptime_urls` must answer with; unset means any "
                    "2xx. A 3xx is checked without following the redirect.")
    checks: tuple[UptimeCheck, ...] = Field(
        (),
        description="Checks with their own expectations, checked besides `uptime_urls`: "
                    "`[[uptime_checks]]` tables with `url`, `expect_status`, `expect_text` in "
                    "TOML; a JSON list of such objects in the variable.")
    timeout_seconds: float = Field(
        default=10, gt=0, description="Time limit of one uptime request (seconds).")

    @field_validator("urls", mode="before")
    @classmethod
    def _split_urls(cls, value: Any) -> Any:
        return split_commas(value)

    @field_validator("urls")
    @classmethod
    def _check_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_http_url(u) for u in value)

    @field_validator("checks", mode="before")
    @classmethod
    def _parse_checks(cls, value: Any) -> Any:
        if isinstance(value, str):  # from the environment: a JSON list of tables
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of {{\"url\": ...}} objects "
                                 f"({exc.msg})") from None
        return value


class TlsSettings(Section):
    """The `tls-certexpiry` task: the hosts whose certificate it checks daily, and when a
    certificate fails."""

    PREFIX: ClassVar[str] = "tls_"
    model_config = _config(PREFIX)

    hosts: tuple[str, ...] = Field(
        (),
        description="Hosts whose TLS certificate the `tls-certexpiry` task checks daily, as "
                    "`host` or `host:port` (port 443 by default); comma-separated in the "
                    "variable, a list in TOML.")
    threshold_days: float = Field(
        default=14, ge=0,
        description="A certificate that expires in fewer days than this fails its check "
                    "(days).")
    timeout_seconds: float = Field(
        default=10, gt=0,
        description="Time limit to connect and finish the TLS handshake (seconds).")
    ca_file: str | None = Field(
        None,
        description="PEM file of extra certificate authorities to trust (an internal CA), "
                    "besides the system's.")
    verify: bool = Field(
        True,
        description="When true, a certificate that does not verify (unknown issuer, wrong "
                    "name, expired) fails its check; when false only the expiry counts.")

    @field_validator("hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: Any) -> Any:
        return split_commas(value)


class BackupSettings(Section):
    """The `db-backup` task: where it writes the database's backups and how many it keeps."""

    PREFIX: ClassVar[str] = "backup_"
    model_config = _config(PREFIX)

    dir: str = Field(
        "backups",
        description="Folder the `db-backup` task writes backups to (created when missing; "
                    "relative to the worker's working folder).")
    keep: int = Field(
        default=7, ge=1,
        description="`db-backup` keeps this many newest backups of the database and deletes "
                    "older ones (files).")


class HealthSettings(Section):
    """The health report (`cronjobs health`, `/health`, the built-in health task): its
    time budget and the thresholds of its checks."""

    PREFIX: ClassVar[str] = "health_"
    model_config = _config(PREFIX)

    timeout_seconds: float = Field(
        default=3, gt=0, le=60,
        description="A health report answers within this many seconds; a check still "
                    "running then (hung database or broker) is reported as fail; the "
                    "checks' statements, lock waits and connects end a second later (seconds).")
    cache_seconds: float = Field(
        default=2, ge=0, le=60,
        description="`/health` and `/health/ready` serve one report to every caller for "
                    "this long after it is made; one run at a time regardless (seconds).")
    stuck_seconds: float = Field(
        default=300, gt=0,
        description="Due rows older than this in a queue that has live workers: the "
                    "workers have stopped taking rows (seconds).")
    pause_warn_seconds: float = Field(
        default=3600, gt=0,
        description="Warn about a pause (of a queue, type or task) older than this; one "
                    "left on by mistake stops work silently (seconds).")
    held_warn_seconds: float = Field(
        default=900, gt=0,
        description="Warn when a due row has waited longer than this behind a block or a "
                    "full concurrency limit (seconds).")
    failed_warn_per_hour: int = Field(
        default=10, ge=1, description="Warn when this many rows failed in the last hour (rows).")
    disk_warn_percent: float = Field(default=90, gt=0, le=100,
                                     description="Disk use that warns (percent).")
    disk_fail_percent: float = Field(default=97, gt=0, le=100,
                                     description="Disk use that fails (percent).")
    memory_warn_percent: float = Field(default=90, gt=0, le=100,
                                       description="Memory use that warns (percent).")
    memory_fail_percent: float = Field(default=97, gt=0, le=100,
                                       description="Memory use that fails (percent).")
    check_modules: tuple[str, ...] = Field(
        default=(),
        description="Modules imported before each health run, for the checks they register "
                    "with `@cronjobs.health_check` (besides the `cronjobs.health_checks` entry "
                    "points); comma-separated in the variable, a list in TOML.")

    @field_validator("check_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: Any) -> Any:
        return split_commas(value)
    ping_url_template: str | None = Field(
        default=None, alias="ping_url_template",
        description="Ping URL of every task without a `PING_URL` or `[tasks.<task>] "
                    "ping_url`, `{task}` replaced by the task name "
                    "(`https://hc-ping.com/KEY/{task}`): its scheduled runs send `/start`, "
                    "success and `/fail` pings (healthchecks.io, Cronitor). Unset: none.")
    ping_timeout_seconds: float = Field(
        default=5, gt=0, le=60, alias="ping_timeout_seconds",
        description="One ping out's HTTP timeout; a ping is tried 3 times with back-off "
                    "(once while its receiver does not answer), from a thread of its own "
                    "(seconds).")

    @field_validator("ping_url_template")
    @classmethod
    def _check_ping_template(cls, value: str | None) -> str | None:
        if value is not None:
            check_http_url(value.replace("{task}", "task"))
        return value


class AlertSettings(Section):
    """The alerts the built-in health task sends: when a problem is alerted, repeated or
    recovered, and the channels (a webhook, Telegram, e-mail) it goes to; every channel
    configured here gets every alert."""

    PREFIX: ClassVar[str] = "alert_"
    model_config = _config(PREFIX)

    repeat_minutes: float = Field(
        default=60, gt=0, description="Alert again about a problem still open (or flapping) "
                                      "after this long (minutes).")
    after_runs: int = Field(
        default=2, ge=1, description="Alert about a problem seen failing in this many health "
                                     "runs in a row (runs; 1 alerts at the first).")
    recover_after_runs: int = Field(
        default=2, ge=1, description="Send the recovery of an alerted problem after this many "
                                     "passing health runs in a row (runs).")
    flap_changes: int = Field(
        default=3, ge=2, description="A problem whose state (failing/passing) changed this many "
                                     "times within alert_flap_window_minutes is flapping "
                                     "(changes).")
    flap_window_minutes: float = Field(
        default=60, gt=0, description="The window in which state changes are counted for "
                                      "flapping (minutes).")
    timeout_seconds: float = Field(
        default=10, gt=0, description="Timeout of one notification (seconds).")
    webhook_url: str | None = Field(
        default=None, description="POST a JSON alert to this URL (http:// or https://).")
    telegram_bot_token: str | None = Field(
        default=None, description="Telegram bot token (with alert_telegram_chat_id).")
    telegram_chat_id: str | None = Field(default=None, description="Telegram chat id.")
    telegram_api_url: str = Field(
        default="https://api.telegram.org", description="Telegram Bot API base URL.")
    smtp_host: str | None = Field(default=None, description="SMTP server host.")
    smtp_port: int = Field(default=25, ge=1, le=65535, description="SMTP server port.")
    smtp_starttls: bool = Field(default=False, description="Use STARTTLS.")
    smtp_username: str | None = Field(default=None, description="SMTP login.")
    smtp_password: str | None = Field(default=None, description="SMTP password.")
    smtp_from: str = Field(default="cronjobs@localhost", description="From address.")
    smtp_to: tuple[str, ...] = Field(
        default=(), description="Recipients, comma-separated in the environment.")

    @field_validator("smtp_to", mode="before")
    @classmethod
    def _split_to(cls, value: Any) -> Any:
        return split_commas(value)


class WebhookSettings(Section):
    """Signed webhooks (`WEBHOOK_URL` of a handler, `callback_url` of a row): the secret
    that signs them and how a worker's sender retries them (docs/webhooks.md)."""

    PREFIX: ClassVar[str] = "webhook_"
    model_config = _config(PREFIX)

    secret: str | None = Field(
        default=None,
        description="The HMAC-SHA256 key of the `X-Cronjobs-Signature` header of every webhook "
                    "delivery. Unset: deliveries are recorded but not sent (the worker logs one "
                    "warning) until it is set.")
    max_tries: int = Field(
        default=8, ge=1, le=100,
        description="POSTs of one delivery before it is `failed` (tries).")
    timeout_seconds: float = Field(
        default=5, gt=0, le=60, description="One POST's HTTP timeout (seconds).")
    backoff_seconds: float = Field(
        default=10, gt=0, le=3600,
        description="Wait before the second try, doubling after each failed try, at most "
                    "one hour (seconds).")
    allow_private: bool = Field(
        default=False,
        description="Let a row's `callback_url` reach a loopback, private, link-local or "
                    "reserved address (a receiver on this machine or network). Off: such a "
                    "URL is refused at dispatch (an IP literal, `localhost`) and at send "
                    "time (a name resolving to one). A handler's WEBHOOK_URL is trusted.")

    @field_validator("secret", mode="before")
    @classmethod
    def _empty_secret(cls, value: Any) -> Any:
        return None if value == "" else value  # `CRONJOBS_WEBHOOK_SECRET=`: not set

    @field_validator("secret")
    @classmethod
    def _check_secret(cls, value: str | None) -> str | None:
        if value is not None and len(value) < 16:
            raise ValueError(f"the webhook secret must have at least 16 characters, got "
                             f"{len(value)}")
        return value


# The sections of `Settings`, by attribute, in the order of the configuration reference.
SECTIONS: dict[str, type[Section]] = {
    "dashboard": DashboardSettings, "uptime": UptimeSettings, "tls": TlsSettings,
    "backup": BackupSettings, "health": HealthSettings, "alerts": AlertSettings,
    "webhooks": WebhookSettings}
