"""A new row's columns: every dispatch argument checked and the derived columns computed
(`build_row`), and the type's rules (`check_type`: a type no handler of this process
knows is refused unless it is a remote type). `dispatching` inserts what this builds."""

from __future__ import annotations

import difflib
import json
import re
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from .. import durations, limits, tracing
from ..app import App
from ..clock import as_utc
from ..config.urls import check_callback_url, private_literal_host
from ..errors import InvalidCallbackUrl, InvalidJob
from ..flow import rules as flowrules
from ..status import Status


def build_row(app: App, type: str, payload: dict | None, *, idempotency_key: str | None = None,
              parent_id: int | None = None, priority: int = 5,
              scheduled_at: datetime | None = None, title: str | None = None,
              max_attempts: int | None = None, queue: str | None = None,
              known_type: bool = True, root_id: int | None = None,
              expires_at: datetime | None = None, expires_in: object = None, **extra) -> dict:
    """Check dispatch arguments (`extra`: `callback_url`, `_callback`); return a new row's columns.

    Args:
        expires_at, expires_in: the row's deadline (`expiry`): a time, or a duration from
            `scheduled_at` (else now); not both.
        max_attempts: attempts of this row (>= 1); None leaves it unset, and the worker
            that claims the row sets its handler's MAX_ATTEMPTS (the handler that runs
            the row decides, not this process's registry).
        known_type: False accepts a type no handler of this process is registered for
            (one that another codebase's workers run); see `check_type`.
        root_id: the first row of the new row's family (a handler's `dispatch` passes
            its own row's root); default `parent_id`. Ignored without `parent_id`.

    Raises:
        InvalidJob: naming the bad argument and its value.
    """
    cls = _handler_of(app, type, known_type)
    payload_json = _payload_json(payload)
    if title is not None:
        limits.check_name(title, "title", limits.TITLE_MAX_CHARS, allow_empty=True)
    if idempotency_key is not None:
        limits.check_key(idempotency_key)
    if queue is not None:
        limits.check_queue(queue)
    if not isinstance(priority, int) or isinstance(priority, bool) \
            or not -2**31 <= priority < 2**31:
        raise InvalidJob(f"priority must be an integer from -2**31 to 2**31-1, got {priority!r}")
    if max_attempts is not None and (not isinstance(max_attempts, int)
                                     or isinstance(max_attempts, bool)
                                     or not 1 <= max_attempts < 2**31):
        raise InvalidJob(f"max attempts must be an integer from 1 to 2**31-1, "
                         f"got {max_attempts!r}")
    _check_id(parent_id, "parent id")
    _check_id(root_id, "root id")
    scheduled_at = _scheduled_utc(scheduled_at)
    now = app.clock.now()
    expires = expiry(expires_at, expires_in, scheduled_at or now)
    return {"type": type, "queue": queue or app.queue_of(type), "status": Status.PENDING,
            "limit_key": limit_key_of(cls, payload), "trace_context": tracing.context_of_dispatch(),
            "priority": priority, "payload": payload_json, "attempts": 0,
            "max_attempts": max_attempts, "idempotency_key": idempotency_key,
            "parent_id": parent_id, "root_id": (root_id or parent_id) if parent_id else None,
            "title": title, "scheduled_at": scheduled_at,
            "created_at": now, "updated_at": now, "expires_at": expires, **_callback(app, **extra)}


def _callback(app: App, callback_url: str | None = None) -> dict:
    """The `callback_url` column of a new row: None, or an http(s) URL with a host within
    2,048 characters (`limits.URL_MAX_CHARS`), ASCII, without user or password, and,
    unless `webhook_allow_private` is set, not naming a private address (an IP literal
    or `localhost`: `config.urls.private_literal_host`).

    Raises:
        InvalidCallbackUrl: an InvalidJob and a ValueError, naming the value; nothing is
            written then.
    """
    if callback_url is not None:
        try:
            check_callback_url(callback_url)
        except ValueError as exc:
            raise InvalidCallbackUrl(str(exc)) from None
        host = None if app.settings.webhooks.allow_private else private_literal_host(callback_url)
        if host is not None:
            raise InvalidCallbackUrl(
                f"callback_url {callback_url!r:.120} names a loopback, private, link-local or "
                f"reserved address ({host}): set CRONJOBS_WEBHOOK_ALLOW_PRIVATE=true to allow it")
    return {"callback_url": callback_url}


def expiry(expires_at: object, expires_in: object, start: datetime) -> datetime | None:
    """A new row's `expires_at` (naive UTC; None: no deadline) from `dispatch`'s
    `expires_at` (a datetime) or `expires_in` (a duration, `durations.seconds`) counted
    from `start` (the row's `scheduled_at`, else now; naive UTC).

    Raises:
        InvalidJob: both given, not a datetime or a duration, or not after `start`.
    """
    if expires_at is not None and expires_in is not None:
        raise InvalidJob(f"give expires_at or expires_in, not both (got {expires_at!r} "
                         f"and {expires_in!r})")
    if expires_in is not None:
        try:
            return start + timedelta(seconds=durations.seconds(expires_in, name="expires_in"))
        except ValueError as exc:
            raise InvalidJob(str(exc)) from None
    if expires_at is None:
        return None
    if not isinstance(expires_at, datetime):
        raise InvalidJob(f"expires_at must be a datetime, got {expires_at!r:.80}")
    try:
        value = as_utc(expires_at)
    except OverflowError:
        raise InvalidJob(f"expires_at is out of range in UTC, got {expires_at!r}") from None
    if value <= start:
        raise InvalidJob(f"expires_at must be after the row's start ({start:%Y-%m-%d %H:%M:%S} "
                         f"UTC, its scheduled_at or now), got {value:%Y-%m-%d %H:%M:%S} UTC")
    return value


def _scheduled_utc(value: object) -> datetime | None:
    """`scheduled_at` as naive UTC (None stays None).

    Raises:
        InvalidJob: not a datetime, or an aware one with no UTC datetime (next to year 1
            or 9999).
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidJob(f"scheduled_at must be a datetime, got {value!r}")
    try:
        return as_utc(value)
    except OverflowError:
        raise InvalidJob(f"scheduled_at is out of range in UTC, got {value!r}") from None


def _check_id(value: object, what: str) -> None:
    """Raise InvalidJob unless `value` is None or a row id (1 to 2**63 - 1)."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or not 1 <= value < 2**63):
        raise InvalidJob(f"{what} must be a positive integer, got {value!r}")


def limit_key_of(cls: type | None, payload: dict | None) -> str | None:
    """The limit key of a new row of handler `cls` (its LIMIT_KEY field of `payload`, or
    its `limit_key(payload)`); None without one.

    Raises:
        InvalidJob: the key is not text or a number, or is over 191 characters.
    """
    key = flowrules.key_of(cls, payload or {})
    if key is not None:
        limits.check_name(key, "limit key", limits.LIMIT_KEY_MAX_CHARS)
    return key


# What an unknown type's error tells a Python caller to do (the HTTP API says only the
# CRONJOBS_REMOTE_TYPES part: web.dispatchapi).
REMOTE_REMEDY = "pass known_type=False (CLI --remote) or list it in CRONJOBS_REMOTE_TYPES"
# A type no handler here knows (run by another codebase): a handler's TYPE, in ASCII names.
REMOTE_TYPE = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.(?:discover|execute)")


def _handler_of(app: App, job_type: str, known_type: bool) -> type | None:
    """The handler class of `job_type` here, or None for a remote type (`known_type=False`,
    `--remote`, `remote_types`): another codebase's handler's TYPE, so of the same shape
    (`REMOTE_TYPE`: dotted, ending in .discover or .execute), or no worker could ever run
    the row.

    Raises:
        InvalidJob: a bad name, an unknown type (`check_type`), a remote type of
            another shape.
    """
    limits.check_name(job_type, "job type", limits.TYPE_MAX_CHARS)
    cls = app.resolve(job_type)
    if cls is None and known_type:
        check_type(app, job_type)
    if cls is None and not REMOTE_TYPE.fullmatch(job_type):
        raise InvalidJob(f"job type {job_type!r:.80} must be dotted names of letters, digits, "
                         f"_ and - ending in .discover or .execute, as a handler's TYPE")
    return cls


def check_type(app: App, type: str) -> None:
    """Refuse a type that no handler of this process is registered for, unless it matches
    a pattern of the `remote_types` setting (`billing.*`: run by another codebase).

    Raises:
        InvalidJob: `unknown job type 'x' (did you mean 'y'?)`, one line.
    """
    if app.resolve(type) is not None or is_remote(app, type):
        return
    close = difflib.get_close_matches(type, list(app.handlers.registered_handlers()), n=1,
                                      cutoff=0.8)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise InvalidJob(f"unknown job type {type!r}{hint}: no handler is registered for it here "
                     f"(see `cronjobs list-handlers`); for a type that another codebase runs, "
                     + REMOTE_REMEDY)


def is_remote(app: App, type: str) -> bool:
    """True when `type` matches a pattern of the `remote_types` setting (fnmatch, case
    sensitive: `billing.*`, `*.export.execute`)."""
    return any(fnmatchcase(type, pattern) for pattern in app.settings.remote_types)


def _payload_json(payload: Any) -> str:
    payload = {} if payload is None else payload
    if not isinstance(payload, dict):
        raise InvalidJob(f"payload must be a JSON object (dict), got "
                         f"{payload.__class__.__name__}: {payload!r:.80}")
    limits.check_json_depth(payload, "payload")
    try:
        payload_json = json.dumps(payload, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"payload is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidJob("payload is not JSON-serialisable: nested too deeply") from None
    limits.check_json_size(payload_json, "payload", limits.PAYLOAD_MAX_BYTES)
    return payload_json
