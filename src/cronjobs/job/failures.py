"""What a failure leaves behind: its traceback, bounded, and its group.

`traceback_text` formats a handler's exception where it happens (the job process, the
worker thread, the calling thread): the row's error text on the first line, then Python's
traceback (file names, line numbers, chained exceptions), the last part kept within
`limits.TRACEBACK_MAX_BYTES`. `where` names the raising frame for the worker log's line.

`pattern` and `fingerprint` group failures: the exception type (the text before the first
": " when it is a dotted name) stays, the rest of the error's first `TEXT_CHARS`
characters is normalised, in this order:

| what | becomes |
|---|---|
| a URL's query values (and its user and fragment) | `?page=<v>&sort=<v>` |
| a quoted value (`'...'`, `"..."`), unless a name (letters, `_`, `.`: `'chat_id'`) | `'<s>'` |
| a UUID | `<uuid>` |
| a hex string (`0x1f`, or 8+ hex digits mixing digits and letters) | `<hex>` |
| an id (a word of 6+ letters, digits, `_`, `-` holding a digit: `ord_8f7Gh2k`) | `<id>` |
| a number (`7`, `502`, `0.25`) | `<n>` |
| runs of white space | one space |

So `account 190: API answered 502` and `account 7: API answered 503` are one group
(`account <n>: API answered <n>`); a URL path segment that is a number or an id is
normalised by the same rules. The fingerprint is 40 hex digits of a BLAKE2b hash of the
pattern. A row written before migration 0013 has no stored fingerprint: `groups` computes
it from the first `TEXT_CHARS` characters of its error, the same text the writer hashes.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import sys
import traceback as tb

from sqlalchemy import Connection

from .. import limits, store

TEXT_CHARS = store.views.ERROR_KEY_CHARS  # a group is decided by the error's first 200 chars
FIRST_LINE_MAX_CHARS = 1_000  # the error's first line, heading a stored traceback
UNMARKED_MAX = 50  # error texts of rows without a stored fingerprint a group names at most
MARKER_ROOM = 64  # bytes kept for the marker of a cut traceback

_TYPE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z][A-Za-z_]*(?=: )")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_QUOTED = re.compile(r"(?<!\w)(['\"])([^'\"\n]{0,200})\1(?!\w)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z_.]*")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"\b(?:0x[0-9a-fA-F]+|(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])"
                  r"[0-9a-fA-F]{8,})\b")
_ID = re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{5,}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACE = re.compile(r"\s+")


def _url(match: re.Match) -> str:
    url = match.group(0).rstrip(".,;:)")
    tail = match.group(0)[len(url):]
    base, query_sep, query = url.partition("?")
    base = re.sub(r"(://)[^/@]*@", r"\1", base.split("#")[0], count=1)
    if query_sep:
        query = query.split("#")[0]
        base += "?" + "&".join(part.split("=")[0] + "=<v>" if "=" in part else "<v>"
                               for part in query.split("&"))
    return base + tail


def _quoted(match: re.Match) -> str:
    quote, text = match.group(1), match.group(2)
    if len(text) <= 64 and _NAME.fullmatch(text):
        return match.group(0)
    return f"{quote}<s>{quote}"


def pattern(error: str | None) -> str:
    """The normalised form of an error text (see the module's table): the group's text,
    as the Failed page and `cronjobs failed` show it.

    Args:
        error: the row's error text (None: no text); only its first `TEXT_CHARS`
            characters count.

    Returns:
        The exception type as written, then the normalised rest, on one line.
    """
    text = (error or "")[:TEXT_CHARS]
    head = _TYPE.match(text)
    kind = head.group(0) if head else ""
    rest = text[len(kind):]
    rest = _URL.sub(_url, rest)
    rest = _QUOTED.sub(_quoted, rest)
    rest = _UUID.sub("<uuid>", rest)
    rest = _HEX.sub("<hex>", rest)
    rest = _ID.sub("<id>", rest)
    rest = _NUMBER.sub("<n>", rest)
    return _SPACE.sub(" ", kind + rest).strip()


def digest(group_pattern: str) -> str:
    """The fingerprint of a group given by its `pattern`: 40 hex digits (BLAKE2b)."""
    return hashlib.blake2b(group_pattern.encode("utf-8"), digest_size=20).hexdigest()


def fingerprint(error: str | None) -> str:
    """The group of an error text: 40 hex digits hashing its `pattern` (the column
    `cronjob_queue.fingerprint`)."""
    return digest(pattern(error))


# -- the traceback -------------------------------------------------------------------------
def bounded(first_line: str, body: str, max_bytes: int = limits.TRACEBACK_MAX_BYTES) -> str:
    """`first_line` (cut to `FIRST_LINE_MAX_CHARS`), a newline and `body`, within
    `max_bytes` of UTF-8: when longer, the first line stays and the end of `body` is
    kept after a marker that says how much was cut. Cleaned for storage
    (`limits.clean_text`)."""
    head = limits.clean_text(first_line.splitlines()[0] if first_line.strip() else "")
    head = head[:FIRST_LINE_MAX_CHARS] + "\n"
    data = limits.clean_text(body).encode("utf-8")
    room = max_bytes - len(head.encode("utf-8"))
    if len(data) <= room:
        return head + data.decode("utf-8")
    tail = data[len(data) - max(room - MARKER_ROOM, 0):]
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) // 2:  # start the tail at a whole line
        tail = tail[newline + 1:]
    marker = f"[... {len(data) - len(tail):,} bytes of the traceback cut ...]\n"
    return head + marker + tail.decode("utf-8", "ignore")


def traceback_text(exc: BaseException, error: str) -> str:
    """The stored traceback of `exc`: `error` (the row's error text) on the first line,
    then Python's traceback with file names and line numbers, bounded (`bounded`)."""
    return bounded(error, "".join(tb.format_exception(exc)))


def _shown_path(filename: str) -> str:
    """`filename` relative to the longest entry of `sys.path` (or the working directory)
    holding it: `handlers/x.py`, `requests/models.py`; else as it is."""
    best = ""
    try:
        here = os.getcwd()
    except OSError:  # the working directory was removed
        here = ""
    for root in [here, *sys.path]:
        if not root or root == ".":  # the working directory: `here`
            continue
        root = os.path.join(here, root) if not os.path.isabs(root) and here else root
        root = os.path.normpath(root) + os.sep
        if filename.startswith(root) and len(root) > len(best):
            best = root
    return filename[len(best):] if best else filename


def where(exc: BaseException, handler_class: type | None = None) -> str:
    """`file:line` of the frame that raised `exc` (`requests/models.py:1021`), followed
    by `via file:line` of the innermost frame in `handler_class`'s file when that is
    another frame; "" when `exc` has no traceback."""
    frames = tb.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    shown = f"{_shown_path(last.filename)}:{last.lineno}"
    try:
        own = inspect.getsourcefile(handler_class) if handler_class is not None else None
    except (TypeError, OSError):
        own = None
    if own:
        mine = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(own)]
        if mine and mine[-1] is not last:
            shown += f" via {_shown_path(mine[-1].filename)}:{mine[-1].lineno}"
    return shown


# -- groups as the Failed page and `cronjobs failed` show them -----------------------------
def groups(conn: Connection, job_type: str | None = None,
           scan: int = store.views.GROUP_SCAN) -> list[dict]:
    """Failed rows (the newest `scan`, of `job_type` when given) grouped by type and
    fingerprint, biggest group first; a row without a stored fingerprint (written before
    migration 0013, or failed by recover-stale) is grouped by the one computed from its
    error.

    Returns:
        `[{type, fingerprint, pattern, count, newest_id, newest_at, examples, unmarked}]`:
        `examples` one or two `(id, error key)` of the group (its newest and oldest
        scanned rows), `unmarked` the error keys of its rows without a stored fingerprint
        (at most `UNMARKED_MAX`).
    """
    merged: dict[tuple[str, str], dict] = {}
    for raw in store.views.failed_groups(conn, job_type, scan=scan):
        stored = raw["fingerprint"]
        key = (raw["type"], stored or fingerprint(raw["error"]))
        group = merged.setdefault(key, {
            "type": key[0], "fingerprint": key[1], "count": 0, "newest_id": 0,
            "newest_at": None, "oldest_id": raw["oldest_id"], "unmarked": []})
        group["count"] += raw["count"]
        group["newest_id"] = max(group["newest_id"], raw["newest_id"])
        group["oldest_id"] = min(group["oldest_id"], raw["oldest_id"])
        if raw["newest_at"] is not None:
            group["newest_at"] = max(group["newest_at"] or raw["newest_at"], raw["newest_at"])
        if stored is None:
            group["unmarked"].append(raw["error"])
    out = sorted(merged.values(), key=lambda g: (-g["count"], -g["newest_id"]))
    texts = store.views.error_keys(conn, sorted({i for g in out
                                                 for i in (g["newest_id"], g["oldest_id"])}))
    for group in out:
        shown = dict.fromkeys((group["newest_id"], group.pop("oldest_id")))
        group["examples"] = [(i, texts.get(i, "")) for i in shown]
        group["pattern"] = pattern(group["examples"][0][1])
        group["unmarked"] = sorted(group["unmarked"])[:UNMARKED_MAX]
    return out


def group_of(conn: Connection, job_id: int) -> dict | None:
    """The group of failed row `job_id`: `{type, pattern, unmarked}` (`unmarked`: the
    error keys of the group's rows without a stored fingerprint among the newest scanned,
    and the row's own when it has none), or None when the row is not failed."""
    row = store.views.failure_of(conn, job_id)
    if row is None:
        return None
    mark = row["fingerprint"] or fingerprint(row["error"])
    unmarked = {row["error"]} if row["fingerprint"] is None else set()
    for group in groups(conn, row["type"]):
        if group["fingerprint"] == mark:
            unmarked.update(group["unmarked"])
    return {"type": row["type"], "pattern": pattern(row["error"]),
            "unmarked": tuple(sorted(unmarked)[:UNMARKED_MAX])}
