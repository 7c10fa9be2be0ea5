"""The TOML tables of the settings with fields of their own: `[tasks.<task>]`,
`[queues.<queue>]` and `[[uptime_checks]]`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from ..flow.rules import check_concurrency, parse_rate
from ..schedule.jitter import check_jitter, check_zone
from ..schedule.slots import check_frequency
from .urls import check_http_url


class TaskSettings(BaseModel):
    """Operator settings of one task (`[tasks.<task>]` in the TOML file).

    Attributes:
        enabled: initial kill-switch state for a task seen for the first time
            (the dashboard/CLI switch in `cronjob_runtime.enabled` wins afterwards).
        frequency: `minute`, `hour`, `day`, `month`, a cron macro or a 5-field cron
            expression, overriding the handler's `FREQUENCY`.
        after: another task whose run of the same slot must have ended first,
            overriding the handler's `AFTER` (`""`: none).
        timezone: the IANA zone of the task's cron lines, overriding `TIMEZONE`.
        jitter: overrides `JITTER` (seconds or `"5m"`; 0: none).
        spread: overrides `SPREAD`.
    """

    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool | None = Field(
        None,
        description="Initial kill-switch state of a task seen for the first time; the "
                    "switch of `cronjobs tasks enable/disable` (and the dashboard) wins "
                    "afterwards. Destructive tasks ship disabled unless this is true.")
    frequency: str | None = Field(
        None,
        description="Overrides the handler's FREQUENCY: `minute`, `hour`, `day`, `month`, a "
                    "cron macro (`@daily` ...) or a 5-field cron expression.")
    after: str | None = Field(
        None,
        description="Overrides the handler's AFTER: the task whose run of the same slot "
                    "(its whole family) must have ended before this task's slot starts; "
                    "an empty string: none.")
    timezone: str | None = Field(
        None,
        description="Overrides the handler's TIMEZONE: the IANA zone the task's cron lines "
                    "are read in and its next runs are shown in (`Europe/Istanbul`).")
    jitter: float | str | None = Field(
        None,
        description="Overrides the handler's JITTER: a deterministic offset per slot in "
                    "[0, jitter) seconds added to the slot row's time (`90`, `5m`; 0: none).")
    spread: StrictBool | None = Field(
        None,
        description="Overrides the handler's SPREAD: an offset per task within its period, "
                    "so many tasks of one frequency do not start at once.")

    @field_validator("frequency")
    @classmethod
    def _check_frequency(cls, value: str | None) -> str | None:
        # Checked here: a bad override would otherwise make every tick raise.
        if value is not None:
            check_frequency(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str | None) -> str | None:
        return None if value is None else check_zone(value, "timezone")

    @field_validator("jitter")
    @classmethod
    def _check_jitter(cls, value: float | str | None) -> float | None:
        return None if value is None else check_jitter(value, "jitter")


class UptimeCheck(BaseModel):
    """One URL of the `http-uptime` task with its own expectations (`[[uptime_checks]]`).

    Attributes:
        url: the URL to GET.
        expect_status: the HTTP status it must answer with (default: any 2xx).
        expect_text: text the body must contain (default: none).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str = Field(description="The URL to GET.")
    expect_status: int | None = Field(
        default=None, ge=100, le=599,
        description="HTTP status it must answer with; unset means any 2xx (a 3xx is checked "
                    "without following the redirect).")
    expect_text: str | None = Field(None, description="Text the body must contain.")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return check_http_url(value)


class QueueSettings(BaseModel):
    """Operator limits of one queue (`[queues.<queue>]` in TOML; `CRONJOBS_QUEUES` as a
    JSON object of such tables). They apply to the queue as a whole, all workers and
    hosts together, besides the limits of each handler.

    Attributes:
        concurrency: at most this many rows of the queue running at once; None: no limit.
        rate_limit: at most this many starts per rolling second/minute/hour (`"30/s"`,
            `"100/m"`, `"5/h"`); None: no limit.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    concurrency: int | None = Field(
        None, description="At most this many rows of the queue running at once, all workers "
                          "together.")
    rate_limit: str | None = Field(
        None, description="At most this many starts per rolling window, all workers together: "
                          "`30/s`, `100/m`, `5/h`.")

    @field_validator("concurrency", mode="before")
    @classmethod
    def _check_concurrency(cls, value: object) -> object:
        return check_concurrency(value, "concurrency")

    @field_validator("rate_limit")
    @classmethod
    def _check_rate(cls, value: str | None) -> str | None:
        parse_rate(value, "rate_limit")
        return value
