"""The TOML tables of the settings with fields of their own: `[tasks.<task>]`,
`[queues.<queue>]` and `[[uptime_checks]]`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from ..durations import seconds
from ..flow.rules import check_concurrency, parse_rate
from ..schedule.catchup import check_max, check_mode
from ..schedule.deadline import check_starting_deadline
from ..schedule.expect import check_auto_pause, parse_expect
from ..schedule.jitter import check_jitter
from ..schedule.slots import check_frequency, check_zone
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
        auto_pause_after_failures: pause the task after this many failed scheduled runs
            in a row, overriding the handler's `AUTO_PAUSE_AFTER_FAILURES` (None: its).
        expect: `{success_within = "26h", duration = ["30s", "20m"]}`, overriding the
            handler's `EXPECT` (None: its).
        catchup, catchup_window, catchup_max: override the handler's `CATCHUP`,
            `CATCHUP_WINDOW` (a duration) and `CATCHUP_MAX` (missed runs).
        ping_url: the task's ping URL (healthchecks.io, Cronitor), overriding the
            handler's `PING_URL` and the settings' `ping_url_template`.
        starting_deadline: overrides the handler's `STARTING_DEADLINE` (seconds or
            `"2m"`).
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
                    "cron macro (`@daily` ...) or a 5-field cron expression. A section "
                    "with a frequency that names no registered task declares an external "
                    "task, fed by its pings in (`cronjobs ping`).")
    after: str | None = Field(
        None,
        description="Overrides the handler's AFTER: the task whose run of the same slot "
                    "(its whole family) must have ended before this task's slot starts; "
                    "an empty string: none.")
    auto_pause_after_failures: int | None = Field(
        None,
        description="Overrides the handler's AUTO_PAUSE_AFTER_FAILURES: pause the task "
                    "(reason `auto: N failures in a row`) when this many of its scheduled "
                    "runs in a row failed; `cronjobs resume --task` lifts it.")
    expect: dict | None = Field(
        None,
        description="Overrides the handler's EXPECT: a table with `success_within` (a "
                    "duration: `overdue:<task>` fails past it) and `duration` (`[min, "
                    "max]`: `too_fast` / `too_slow` outside it); either key optional.")

    @field_validator("auto_pause_after_failures", mode="before")
    @classmethod
    def _check_auto_pause(cls, value: object) -> object:
        return check_auto_pause(value, "auto_pause_after_failures")

    @field_validator("expect", mode="before")
    @classmethod
    def _check_expect(cls, value: object) -> object:
        parse_expect(value, "expect")
        return value
    catchup: str | None = Field(
        None,
        description="Overrides the handler's CATCHUP: `latest` (start the current slot even "
                    "when late), `none` (only within a slot's first minute) or `all` (every "
                    "missed slot of the catch-up window).")
    catchup_window: str | float | None = Field(
        None,
        description="Overrides the handler's CATCHUP_WINDOW: how far back a missed slot may "
                    "have begun and still start with `catchup = \"all\"` (`6h`, seconds).")
    catchup_max: int | None = Field(
        None,
        description="Overrides the handler's CATCHUP_MAX: at most this many missed slots "
                    "started by one tick with `catchup = \"all\"`.")

    @field_validator("catchup")
    @classmethod
    def _check_catchup(cls, value: str | None) -> str | None:
        return None if value is None else check_mode(value, "catchup")

    @field_validator("catchup_window", mode="before")
    @classmethod
    def _check_catchup_window(cls, value: object) -> object:
        if value is not None:
            seconds(value, name="catchup_window")
        return value

    @field_validator("catchup_max", mode="before")
    @classmethod
    def _check_catchup_max(cls, value: object) -> object:
        return None if value is None else check_max(value, "catchup_max")
    ping_url: str | None = Field(
        None,
        description="The task's ping URL (healthchecks.io, Cronitor): `/start`, success "
                    "and `/fail` pings of its scheduled runs; overrides the handler's "
                    "PING_URL and `ping_url_template`.")

    @field_validator("ping_url")
    @classmethod
    def _check_ping_url(cls, value: str | None) -> str | None:
        return check_http_url(value) if value is not None else None

    starting_deadline: float | str | None = Field(
        None,
        description="Overrides the handler's STARTING_DEADLINE: how long after its slot a "
                    "scheduled run may still start (`90`, `\"2m\"`); a row not started by "
                    "then ends `expired` and counts as a skip.")

    @field_validator("starting_deadline")
    @classmethod
    def _check_starting_deadline(cls, value: float | str | None) -> float | str | None:
        check_starting_deadline(value, "[tasks.x] starting_deadline")
        return value
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
