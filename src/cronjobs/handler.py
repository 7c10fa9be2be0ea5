"""The handler contract: `CronJobHandler`, `RetryLater` and the `Job` row handed to it."""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, ClassVar

from markupsafe import Markup

STAGES = ("discover", "execute")
FREQUENCIES = ("minute", "hour", "day", "month")
# a scheduled handler's OVERLAP (cronjobs.schedule.overlap)
OVERLAPS = ("skip", "buffer_one", "allow")
# What a family's completion can start (`on_complete`, `on_success`, `on_failure` of the
# root's handler), each a row of type `<root type without its stage>.<kind>`.
CALLBACK_KINDS = ("complete", "success", "failure")
MAX_RETRY_LATER_SECONDS = 366 * 24 * 3600
DISPATCH_SCOPES = ("read", "dispatch", "operate", "admin")  # = store.tokens.SCOPES (a test)
BLOCKS = (None, "key", "type")  # what a RetryLater may block besides its row


class RetryLater(Exception):
    """Raise from `handle()` to put the row back to `pending` without using an attempt.

    Args:
        delay: seconds (int/float) or a `timedelta` to wait before the next try
            (rate limits, flood waits; pass an API's `Retry-After` through). Must not be
            negative.
        reason: optional text written to the row's process log (and to the block).
        block: `"key"`: hold every row of this type with this row's limit key until
            now + delay (a flood wait of one chat or account); `"type"`: every row of the
            type. A row without a limit key blocks its whole type. Written with the
            outcome, in its transaction; an existing block is extended, never shortened.
            None (the default): only this row waits.

    Raises:
        ValueError: a negative or over-a-year delay, or a `block` other than None,
            "key", "type" (naming the value).
    """

    def __init__(self, delay: float | timedelta = 60, reason: str | None = None, *,
                 block: str | None = None) -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if not 0 <= seconds <= MAX_RETRY_LATER_SECONDS:
            raise ValueError(f"RetryLater delay must be 0 to {MAX_RETRY_LATER_SECONDS} seconds "
                             f"(one year), got {delay!r}")
        if block not in BLOCKS:
            raise ValueError(f"RetryLater block must be 'key', 'type' or None, got {block!r:.60}")
        self.delay_seconds = seconds
        self.reason = reason
        self.block = block
        super().__init__(f"retry later in {seconds:g} s" + (f": {reason}" if reason else ""))


@dataclass(frozen=True)
class Job:
    """One row of `cronjob_queue` as a handler sees it. Times are naive UTC.

    `payload` and `result` are decoded JSON (dicts); the other fields are the columns.
    `max_attempts` is an int for every row a handler runs (the claim sets the handler's
    MAX_ATTEMPTS when the dispatcher gave none); None only on a row claimed by a worker
    that has no handler for its type.
    """

    id: int
    type: str
    queue: str
    status: str
    priority: int
    payload: dict
    result: Any
    process_logs: str | None
    error: str | None
    attempts: int
    max_attempts: int | None
    idempotency_key: str | None
    parent_id: int | None
    title: str | None
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    locked_until: datetime | None
    worker_id: str | None
    created_at: datetime
    updated_at: datetime
    limit_key: str | None = None  # the value of the handler's LIMIT_KEY, set at dispatch
    root_id: int | None = None  # the family's first row (None: this row has no parent)
    callback_url: str | None = None  # the row's webhook (`dispatch(callback_url=...)`)
    # the dispatching trace context (W3C traceparent/tracestate as JSON; `cronjobs.tracing`)
    trace_context: str | None = None

    @classmethod
    def from_row(cls, row: dict, *, decode: bool = True) -> Job:
        """Build a Job from a row mapping of `cronjob_queue`.

        Args:
            row: the row's columns (`payload`, `result_payload` as stored JSON text).
            decode: decode the JSON columns; False gives `payload={}` and `result=None`
                (for a row whose stored JSON cannot be decoded, to record its failure).

        Raises:
            ValueError, RecursionError: `decode` and the stored JSON cannot be decoded, or
                the payload is not a JSON object.
        """
        get = row.get
        data = {name: get(name) for name in _COLUMN_FIELDS}
        payload, result = get("payload"), get("result_payload")
        data["payload"] = json.loads(payload) if decode and payload else {}
        if not isinstance(data["payload"], dict):  # stored by hand or by another program
            raise ValueError(f"payload is a JSON {type(data['payload']).__name__}, not an "
                             f"object: {payload[:60]!r}")
        data["result"] = json.loads(result) if decode and result else None
        return cls(**data)

    def __reduce_ex__(self, protocol: int) -> tuple:
        # How a Job travels to its job process: its values in field order, without the
        # field names (183 bytes against 450), unpickled without the frozen __init__.
        if type(self) is not Job:  # a subclass may add fields: pickled the stock way
            return super().__reduce_ex__(protocol)
        return _job_of_values, (_FIELD_VALUES(self),)


_FIELD_NAMES = tuple(f.name for f in fields(Job))
_FIELD_VALUES = operator.attrgetter(*_FIELD_NAMES)
_COLUMN_FIELDS = tuple(n for n in _FIELD_NAMES if n not in ("payload", "result"))


def _job_of_values(values: tuple) -> Job:
    """The Job that `Job.__reduce_ex__` pickled as its values (field order)."""
    job = object.__new__(Job)
    job.__dict__.update(zip(_FIELD_NAMES, values, strict=True))
    return job


class CronJobHandler:
    """Base class of every handler.

    Subclasses set `TYPE` (dotted, ending in `.discover` or `.execute`) and implement
    `handle(payload, job)`. The return value decides the row's fate (docs/handlers.md):
    `True` completes it; `False` or an exception retries it with backoff, then fails it;
    `{"success": bool, "result": {...}}` completes or fails it and stores `result`;
    `{"success": True, "status": "cancelled", ...}` cancels it (deleted when childless);
    raising `RetryLater(delay)` puts it back without using an attempt; anything else fails
    it without retry.

    Attributes:
        TYPE: the job type, e.g. `"acme.quotasync.discover"`.
        FREQUENCY: `minute`/`hour`/`day`/`month` or a 5-field cron expression; only on
            handlers the scheduler starts.
        MAX_ATTEMPTS: attempts before the row is `failed` (default 3).
        MAX_RUNTIME: seconds a run may take (default 120).
        QUEUE: broker queue name (default: the configured default queue).
        ISOLATION: `"process"` (the default): in a worker the job runs in a job process
            that is stopped at MAX_RUNTIME even when blocked in a system call or a C
            loop. `"thread"`: the job runs in the worker's own thread (no hand-off, no
            process), for handlers whose every call has a timeout; a thread cannot be
            stopped, so a job past MAX_RUNTIME makes the worker recycle, and the job ends
            with the process. `cronjobs worker --isolation process` ignores `"thread"`.
        OVERLAP: what a slot of a scheduled task does while the previous scheduled run
            (for a discover: its whole family, every row dispatched under it) is still
            pending or running: `"skip"` (the default: start nothing, record the skipped
            slot), `"buffer_one"` (one run waits and starts when the running one ends),
            `"allow"` (start anyway). See `cronjobs.schedule.overlap`.
        AFTER: the name of another task (`"acme-sync"`): each slot of this task starts
            only once that task's run of the same slot (its whole family) has ended,
            whatever its outcome; the slot's row waits (`waiting`) meanwhile. None (the
            default): no order. `[tasks.<task>] after` in the settings overrides it.
        DESTRUCTIVE: True for work that deletes records or sends data out: the task
            ships disabled, and while its switch is off every run of its types (scheduled,
            manual or dispatched) ends `cancelled` with reason `disabled` without calling
            `handle()`.
        CONCURRENCY: at most this many rows of the type `running` at once, all workers
            and hosts together (per limit key when the handler has one); None: no limit.
        RATE_LIMIT: at most this many starts per rolling window, all workers together:
            `"30/s"`, `"100/m"`, `"5/h"` (per limit key); None: no limit.
        LIMIT_KEY: a payload field whose value (text or number) is the row's limit key,
            computed at dispatch; CONCURRENCY and RATE_LIMIT then apply per key. A handler
            may instead define a method `limit_key(self, payload) -> str | None`. Rows
            without a key share the type's keyless limit. `raise RetryLater(delay,
            block="key")` blocks the row's key (docs/handlers.md, "Limits").
        EXAMPLE_PAYLOAD: a payload this handler takes (a dict), shown as the example in
            the dashboard's Run now box of its task; None (the default): `{}`.
        MIN_SUCCESS_RATIO: the share of the rows under a root (0.0 to 1.0) that must
            complete for its family to count as a success (`on_success` rather than
            `on_failure`; a task's last success); 1.0 (the default): every one.
        AUTO_PAUSE_AFTER_FAILURES: pause the task (reason `auto: N failures in a row`)
            when this many of its scheduled runs in a row failed (a discover's outcome is
            its family's); an integer >= 1, None (the default): never. `cronjobs resume
            --task` lifts the pause and starts the count again.
        EXPECT: what health expects of the task: `{"success_within": "26h", "duration":
            ("30s", "20m")}` (either key optional; durations as `cronjobs.durations`
            reads them): `overdue:<task>` fails once `success_within` passed without a
            successful run; `too_fast:<task>` / `too_slow:<task>` warn when the last run's
            duration is outside the range. None (the default): no expectations.
        CATCHUP: what a tick does with the slots missed while no scheduler ticked:
            `"latest"` (the default: the current slot starts even when late, the missed
            ones before it are coalesced), `"none"` (a slot starts only from a tick within
            its first minute), `"all"` (every missed slot that began within
            CATCHUP_WINDOW before now starts, oldest first, at most CATCHUP_MAX per tick).
            Slots not started are recorded as skipped with the reason `missed`. See
            `cronjobs.schedule.catchup`; `[tasks.<task>] catchup` overrides it.
        CATCHUP_WINDOW: `"all"`: how far back a missed slot may have begun and still
            start, a duration (`"6h"`, seconds; default `"1d"`).
        CATCHUP_MAX: `"all"`: at most this many slots started by one tick (int >= 1,
            default 100); the next ticks go on where it stopped.
        SCHEDULES: more schedules of this handler, each a task of its own
            (`<task>:<name>`): a list of dicts `{"name": "tr", "cron": "0 9 * * *",
            "timezone": "Europe/Istanbul", "payload": {"market": "tr"}}` (timezone and
            payload optional); each scheduled run's payload is the entry's payload with
            `slot` and `schedule` (its name) added (docs/handlers.md, "Many schedules").
        PING_URL: the task's ping URL (healthchecks.io, Cronitor): each scheduled run
            sends `<PING_URL>/start?rid=<row id>` when it starts, `<PING_URL>?rid=<id>`
            on success and `<PING_URL>/fail?rid=<id>` (the first KB of the error as the
            body) when it fails, from a background thread; None (the default): the
            settings' `[tasks.<task>] ping_url` or `ping_url_template`, else no ping.
        STARTING_DEADLINE: how long after its slot a scheduled run may still start
            (seconds, `"2m"`, a timedelta; `[tasks.<task>] starting_deadline` wins): a
            slot row not started by `scheduled_at` + this ends `expired`, without calling
            `handle()` or using an attempt, and counts as a skip (reason `expired`).
            None (the default): no deadline.
        TIMEZONE: the IANA zone its cron lines are read in (`"Europe/Istanbul"`), instead
            of the settings' `timezone`; `[tasks.<task>] timezone` wins. Named frequencies
            (`minute` .. `month`) stay UTC periods. None (the default): the settings'.
        JITTER: a deterministic offset per slot in [0, JITTER) seconds (90, `"5m"`),
            from a hash of the task and the slot key, added to the slot row's
            `scheduled_at` (`cronjobs.schedule.jitter`); None (the default): none.
        SPREAD: True gives the task an offset of its own (a hash of its name) within its
            period, so many tasks of one frequency do not all start at once; JITTER adds
            to it, the total below the period. False (the default): none.
        WEBHOOK_URL: an http(s) URL that receives each finished attempt of the type's
            rows as a signed JSON POST (docs/webhooks.md); a row's `callback_url` wins.
            None (the default): no webhook.
        DISPATCH_SCOPE: the token scope (`read` < `dispatch` < `operate` < `admin`) that
            `POST /api/jobs` (and `:batch`) needs to start a row of this type; 403 below it.
            Default `"dispatch"`; the built-in handlers set `"admin"`.

    Idle: a handler may define a classmethod `idle(cls, app) -> str | None` (`app`: the
    `cronjobs.app.App` of the scheduler or page asking): a one-line note saying why its
    task has nothing to do now ("no URLs to check: ..."), or None (the default) when it
    has work. The scheduler's tick does not start a slot of an idle task (reason `idle`
    in `TickReport.skipped`, nothing written, logged at DEBUG only); the task list, the
    task's page and `cronjobs tasks` show the note instead of the next run, and health
    does not call it overdue. Manual runs (Run now, `cronjobs tasks run`) still run. An
    `idle` that raises counts as not idle (logged at WARNING).

    Family callbacks: a handler whose rows dispatch children may define
    `on_complete(self, family, job)`, `on_success(self, family, job)` and
    `on_failure(self, family, job)`. When the root row has finished and every row under it
    has finished too (retries included), its family is complete: `on_complete` runs, and
    `on_success` or `on_failure`, each as a row of its own (type
    `<TYPE without its stage>.complete`, `.success`, `.failure`) with this class's
    retries, MAX_RUNTIME and queue. `family` is a `cronjobs.family.view.Family` (counts,
    reasons, times, failures, `generation`); `job` is the callback's own row. Return as
    from `handle()`.
        error / gateway_error / message: set one before returning `False` to give the
            row its error text.
    """

    TYPE: ClassVar[str | None] = None
    FREQUENCY: ClassVar[str | None] = None
    MAX_ATTEMPTS: ClassVar[int] = 3
    MAX_RUNTIME: ClassVar[float] = 120
    QUEUE: ClassVar[str | None] = None
    DESTRUCTIVE: ClassVar[bool] = False
    ISOLATION: ClassVar[str] = "process"
    CONCURRENCY: ClassVar[int | None] = None
    RATE_LIMIT: ClassVar[str | None] = None
    LIMIT_KEY: ClassVar[str | None] = None
    OVERLAP: ClassVar[str] = "skip"
    AFTER: ClassVar[str | None] = None
    EXAMPLE_PAYLOAD: ClassVar[dict | None] = None
    MIN_SUCCESS_RATIO: ClassVar[float] = 1.0
    AUTO_PAUSE_AFTER_FAILURES: ClassVar[int | None] = None
    EXPECT: ClassVar[dict | None] = None
    CATCHUP: ClassVar[str] = "latest"
    CATCHUP_WINDOW: ClassVar[str | float] = "1d"
    CATCHUP_MAX: ClassVar[int] = 100
    SCHEDULES: ClassVar[list[dict] | None] = None
    PING_URL: ClassVar[str | None] = None
    STARTING_DEADLINE: ClassVar[float | str | timedelta | None] = None
    TIMEZONE: ClassVar[str | None] = None
    JITTER: ClassVar[float | str | None] = None
    SPREAD: ClassVar[bool] = False
    WEBHOOK_URL: ClassVar[str | None] = None
    DISPATCH_SCOPE: ClassVar[str] = "dispatch"

    error: str | None = None
    gateway_error: str | None = None
    message: str | None = None

    def __init__(self, context: Any = None) -> None:
        """Args: context: the `cronjobs.job.context.JobContext` of this run (settings, dispatch)."""
        self.context = context

    def handle(self, payload: dict, job: Job) -> bool | dict:
        """Do the work for one row. Override this.

        Args:
            payload: the decoded JSON payload given at dispatch.
            job: the whole row (id, attempts, parent_id, ...).

        Returns:
            `True`, `False` or a dict as described in the class docstring.
        """
        raise NotImplementedError(f"{type(self).__name__}.handle() is not implemented")

    @classmethod
    def available(cls) -> bool:
        """Return False when a precondition (module installed, credentials) is missing."""
        return True

    @classmethod
    def idle(cls, app: Any) -> str | None:
        """Why the task has nothing to do now (one line), or None: it has work.

        Args:
            app: the `cronjobs.app.App` asking (its settings, `serve_url`).

        Returns:
            The note shown for the idle task, or None (the default: never idle).
        """
        return None

    @staticmethod
    def render_summary(result: dict) -> Markup | str:
        """Render a stored `result` for the Results tab; a `str` is shown escaped."""
        return json.dumps(result, indent=2, sort_keys=True, default=str)

    def dispatch(self, type: str, payload: dict | None = None, **options: Any) -> int:
        """Dispatch a child job of the running row (parent_id is set for you).

        Takes the arguments of `cronjobs.queue.dispatch`; returns the child row id.
        """
        return self.context.dispatch_child(type, payload or {}, **options)

    @property
    def settings(self) -> Any:
        """The `cronjobs.config.Settings` of the running system."""
        return self.context.settings

    def failure_text(self) -> str | None:
        """The error text for a `False` return: `error`, `gateway_error` or `message`."""
        for name in ("error", "gateway_error", "message"):
            value = getattr(self, name, None)
            if value:
                return str(value)
        return None


def task_name(job_type: str) -> str:
    """Map a type to its task: drop the stage, dots to hyphens (`a.b.discover` -> `a-b`)."""
    base, _, stage = job_type.rpartition(".")
    if stage in STAGES and base:
        return base.replace(".", "-")
    return job_type.replace(".", "-")


def callback_kinds(cls: type) -> tuple[str, ...]:
    """The family callbacks handler class `cls` defines (`complete`, `success`,
    `failure`, in that order)."""
    return tuple(kind for kind in CALLBACK_KINDS if callable(getattr(cls, f"on_{kind}", None)))


def callback_type(root_type: str, kind: str) -> str:
    """The type of callback `kind` of a family whose root has type `root_type`
    (`acme.sync.discover`, `complete` -> `acme.sync.complete`)."""
    return f"{root_type.rpartition('.')[0] or root_type}.{kind}"


_CALLBACK_CLASSES: dict[tuple[type, str], type] = {}


def callback_class(cls: type, kind: str) -> type:
    """The handler class that runs callback `kind` of `cls`'s families: `cls` itself
    (its settings, retries, MAX_RUNTIME, queue, limits) whose `handle()` reads the family
    and calls `on_<kind>(family, job)`. One class per `(cls, kind)`."""
    made = _CALLBACK_CLASSES.get((cls, kind))
    if made is None:
        def handle(self, payload: dict, job: Job) -> bool | dict:
            family = self.context.family(int(payload["family"]),
                                         generation=payload.get("generation"))
            return getattr(self, f"on_{kind}")(family, job)

        made = type(f"{cls.__name__}_{kind}", (cls,), {
            "TYPE": callback_type(cls.TYPE or "", kind), "FREQUENCY": None,
            "handle": handle, "__module__": cls.__module__,
            "__doc__": f"Runs {cls.__name__}.on_{kind} for a completed family."})
        _CALLBACK_CLASSES[(cls, kind)] = made
    return made


def stage_of(job_type: str) -> str:
    """Return `discover` or `execute` (the last part of the type)."""
    return job_type.rpartition(".")[2]

