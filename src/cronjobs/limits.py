"""Size limits of everything written to a row, checked in Python before any SQL, and of
what the dashboard reads back.

One limit per text, the same on SQLite, MariaDB and PostgreSQL (docs/architecture.md,
"Limits"), so a row that fits on one backend fits on all of them and the database never
refuses a statement for its size:

| text | limit | over the limit |
|---|---|---|
| job type, task name | 160 characters | refused (`InvalidJob` / `HandlerError`) |
| queue name | 64 characters, `[A-Za-z0-9_.-]` | refused |
| idempotency key | 191 characters, not ending with a space | refused |
| title | 255 characters | refused |
| limit key (a handler's `LIMIT_KEY` value) | 191 characters | refused (`InvalidJob`) |
| reason of a pause or a block | 500 bytes | an operator's refused; a handler's cut, with a marker |
| worker id | 128 characters | host name shortened |
| payload (JSON) | 1,000,000 bytes, nested at most 100 levels | refused (`InvalidJob`) |
| one line of `cronjobs dispatch --stdin` | 2,000,000 bytes | refused, nothing inserted |
| result (JSON) | 1,000,000 bytes, nested at most 100 levels | the run fails, not retried |
| error | 16,000 bytes | cut, with a marker |
| traceback of a failure | 16,384 bytes | first line (the error) and last part kept, a marker |
| one process-log line | 2,000 characters | cut, with a marker |
| process log of a row | 64,000 bytes | oldest lines dropped, with a marker |

A row written before these limits, or by other means, may hold far more; the dashboard
reads only a bounded part of it, with SUBSTR in the query and the size from OCTET_LENGTH:

| read back | limit | over the limit |
|---|---|---|
| dashboard: one text of a row shown | 65,536 bytes (64 KB) | first 64 KB, size, download link |
| dashboard: a result given to `render_summary` | 1,000,000 bytes | no summary, the size said |
| dashboard: HTML from `render_summary` | 262,144 characters | an error box, the size said |
| `/api/jobs/ID`: one text of a row | 1,000,000 bytes | cut; in `"cut"` with size, download URL |

Names must not contain NUL characters or lone surrogates (PostgreSQL and MariaDB refuse
them); free texts (errors, logs) have them replaced instead.
"""

from __future__ import annotations

import re

from .errors import InvalidJob

TYPE_MAX_CHARS = 160  # leaves room for the slot key `cronjobs:<task>:<slot>` (191)
QUEUE_MAX_CHARS = 64
KEY_MAX_CHARS = 191  # utf8mb4 index limit on older MySQL row formats
TITLE_MAX_CHARS = 255
WORKER_ID_MAX_CHARS = 128
PAYLOAD_MAX_BYTES = 1_000_000
RESULT_MAX_BYTES = 1_000_000
# Nesting of a payload or result: objects and arrays inside each other. MySQL's JSON type
# refuses deeper documents too, and Python's JSON decoder and pickle recurse per level, so
# a much deeper value (1,000 levels) could not even be read back by a worker.
JSON_MAX_DEPTH = 100
STDIN_LINE_MAX_BYTES = 2 * PAYLOAD_MAX_BYTES  # a payload (as sent: spaces too) and its fields
ERROR_MAX_BYTES = 16_000  # the error column is TEXT: 65,535 bytes on MySQL
# A handler's traceback (`cronjob_queue.traceback`, TEXT): the error on its first line,
# then the last 16 KB of Python's traceback (the frames nearest the raise).
TRACEBACK_MAX_BYTES = 16_384
LOG_LINE_MAX_CHARS = 2_000
LOG_MAX_BYTES = 64_000
LOG_DROPPED = "[older lines dropped]\n"
# The dashboard shows at most this much of a payload, result, error or process log (a row
# written before these limits, or by other means, may hold far more); the rest downloads.
DISPLAY_MAX_BYTES = 65_536
SUMMARY_MAX_BYTES = RESULT_MAX_BYTES  # a larger stored result gets no Results-tab summary
SUMMARY_HTML_MAX_CHARS = 4 * DISPLAY_MAX_BYTES  # more HTML from render_summary is refused
API_TEXT_MAX_BYTES = 1_000_000  # /api/jobs/ID cuts a larger payload, result, error or log
MIN_MYSQL_PACKET_BYTES = 4 * 1024 * 1024  # a payload, a result and the rest in one statement
REASON_MAX_CHARS = 32  # `outcome_reason`: a `status.Reason` value
LIMIT_KEY_MAX_CHARS = 191  # `cronjob_queue.limit_key`: a handler's LIMIT_KEY value (indexed)
FLOW_REASON_MAX_BYTES = 500  # why a pause or a block was made (cut, not refused)
FLOW_BY_MAX_CHARS = 64  # who made a pause (`cronjob_pause.created_by`)
# Short texts cut where they are made, each the width of its column or a readable length.
EXCEPTION_TEXT_MAX_CHARS = 300  # an exception's message quoted in an error or a log line
ROW_EXCEPTION_TEXT_MAX_CHARS = 500  # ... in the error of a row that cannot be prepared
PROBLEM_KEY_MAX_CHARS = 191  # a health problem's key (`cronjob_alert.problem`)
ALERT_FAILURE_MAX_CHARS = 200  # why a channel failed to deliver an alert
WORKER_HOST_MAX_CHARS = 255  # `cronjob_worker.host`
WORKER_LIST_MAX_CHARS = 1_000  # `cronjob_worker.queues` and `current_jobs`
URL_MAX_CHARS = 2_048  # a webhook URL (`cronjob_queue.callback_url`, `cronjob_webhook.url`)

_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


def check_name(value: object, what: str, max_chars: int, *, allow_empty: bool = False) -> str:
    """Return `value` if it is a usable name: a `str` of at most `max_chars` characters
    (non-empty unless `allow_empty`) without NUL or lone surrogates.

    Raises:
        InvalidJob: naming `what`, the problem and (a prefix of) the value.
    """
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise InvalidJob(f"{what} must be a non-empty string, got {value!r:.80}")
    if len(value) > max_chars:
        raise InvalidJob(f"{what} is {len(value)} characters; the limit is {max_chars} "
                         f"(got {value!r:.60}...)")
    if "\x00" in value or not _encodable(value):
        raise InvalidJob(f"{what} contains a NUL character or an invalid surrogate: {value!r:.80}")
    return value


def check_key(value: object) -> str:
    """Return `value` if it is a usable idempotency key: a name (`check_name`, at most
    `KEY_MAX_CHARS`) that does not end with a space. MySQL and MariaDB compare the key
    column without trailing spaces (PAD SPACE), so `"k "` and `"k"` would be one key there
    and two on PostgreSQL and SQLite.

    Raises:
        InvalidJob: naming the problem and (a prefix of) the value.
    """
    check_name(value, "idempotency key", KEY_MAX_CHARS)
    if value.endswith(" "):
        raise InvalidJob(f"idempotency key must not end with a space (MariaDB compares "
                         f"keys without trailing spaces), got {value!r:.80}")
    return value


def check_queue(value: object) -> str:
    """Return `value` if it is a valid queue name (see the table above).

    Raises:
        InvalidJob: the name is too long or has other characters than `[A-Za-z0-9_.-]`.
    """
    check_name(value, "queue name", QUEUE_MAX_CHARS)
    if not _QUEUE_NAME.match(value):
        raise InvalidJob(f"queue name {value!r} may only contain letters, digits, '_', '.' "
                         f"and '-' (and must start with a letter or digit)")
    return value


def check_flow_reason(reason: str | None) -> str | None:
    """Return an operator's reason for a pause (`cronjobs pause --reason`, the dashboard's
    form) if it fits `FLOW_REASON_MAX_BYTES` of UTF-8; a handler's block reason is cut
    instead (`store.flow`), an operator is told.

    Raises:
        InvalidJob: naming its size and the limit, in bytes.
    """
    size = 0 if reason is None else len(reason.encode("utf-8", "surrogatepass"))
    if size > FLOW_REASON_MAX_BYTES:
        raise InvalidJob(f"reason is {size} bytes; the limit is {FLOW_REASON_MAX_BYTES}")
    return reason


def check_json_size(text: str, what: str, max_bytes: int) -> str:
    """Return the JSON `text` if its UTF-8 size is within `max_bytes`.

    Raises:
        InvalidJob: naming `what`, its size and the limit, in bytes.
    """
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise InvalidJob(f"{what} is {size:,} bytes of JSON; the limit is {max_bytes:,} bytes")
    return text


def json_depth(value: object, stop_after: int = JSON_MAX_DEPTH) -> int:
    """How deeply objects and arrays nest in `value` (a scalar is 0, `{}` and `[]` are 1,
    `{"a": [1]}` is 2), counting no further than `stop_after + 1`. Iterative, so a value
    nested deeper than Python's recursion limit is measured, not crashed on."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > deepest:
            deepest = depth
            if deepest > stop_after:
                return deepest
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, (dict, list, tuple)))
    return deepest


def check_json_depth(value: object, what: str, max_depth: int = JSON_MAX_DEPTH) -> object:
    """Return `value` if its objects and arrays nest at most `max_depth` levels.

    Raises:
        InvalidJob: naming `what`, its depth (or "more than") and the limit.
    """
    depth = json_depth(value, max_depth)
    if depth > max_depth:
        raise InvalidJob(f"{what} is nested more than {max_depth} levels deep (objects and "
                         f"arrays inside each other); the limit is {max_depth}")
    return value


def clean_text(text: str) -> str:
    """`text` with NUL characters and lone surrogates replaced (storable everywhere)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\0")
    return text if _encodable(text) else text.encode("utf-8", "replace").decode("utf-8")


def cut(text: str, max_bytes: int) -> str:
    """`text` cleaned and cut to at most `max_bytes` UTF-8 bytes, ending in a marker that
    says how much was cut."""
    text = clean_text(text)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker = f" ... [cut: {len(data):,} bytes in all]"
    return data[:max_bytes - len(marker)].decode("utf-8", "ignore") + marker


def log_line(text: str) -> str:
    """One process-log line: cleaned, on one line, at most `LOG_LINE_MAX_CHARS`."""
    text = clean_text(text).replace("\r", " ").replace("\n", " | ")
    if len(text) > LOG_LINE_MAX_CHARS:
        text = text[:LOG_LINE_MAX_CHARS - 40] + f" ... [cut: {len(text):,} characters]"
    return text


def bounded_log(old: str | None, new_lines: str) -> str:
    """The process log `old` + `new_lines`, keeping the newest whole lines within
    `LOG_MAX_BYTES` (a row retried or put back many times keeps a bounded log)."""
    text = (old or "") + new_lines
    if len(text.encode("utf-8")) <= LOG_MAX_BYTES:
        return text
    kept: list[str] = []
    size = len(LOG_DROPPED)
    for line in reversed(text.splitlines(keepends=True)):
        size += len(line.encode("utf-8"))
        if size > LOG_MAX_BYTES:
            break
        kept.append(line)
    return LOG_DROPPED + "".join(reversed(kept))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def by_address(who: str, address: str | None, max_chars: int = FLOW_BY_MAX_CHARS) -> str:
    """`who@address` (who made a pause or a schedule entry) within `max_chars`: the user
    part is cut, the address (an IP, up to 45 characters; None: `-`) is kept whole.

    Returns:
        The text, at most `max_chars` characters.
    """
    at = f"@{address or '-'}"[:max_chars]
    return who[:max_chars - len(at)] + at
