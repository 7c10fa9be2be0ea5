"""What the Job page shows of a row's large texts, and their download.

A page shows at most `limits.DISPLAY_MAX_BYTES` (64 KB) of each of payload, result, error,
traceback and process log, read from the database as a prefix (`store.fields.job_heads`), with the
whole size and a link that downloads the raw value (`/jobs/<id>/raw/<field>`, streamed in
chunks). JSON that fits is indented; JSON too deep to parse, or whose indented form would
be more than twice the limit, is shown as stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Blueprint, Response, abort
from sqlalchemy import Connection

from .. import limits, store
from .view import cronjobs_app, head_bytes, pretty_json, valid_text

bp = Blueprint("fields", __name__)

# URL name of each field, the stored column, the download's file suffix and media type
FIELDS = {
    "payload": ("payload", "json", "application/json"),
    "result": ("result_payload", "json", "application/json"),
    "error": ("error", "txt", "text/plain; charset=utf-8"),
    "traceback": ("traceback", "txt", "text/plain; charset=utf-8"),
    "log": ("process_logs", "log", "text/plain; charset=utf-8"),
}


@dataclass(frozen=True)
class Shown:
    """One large text as a page shows it.

    Attributes:
        name: the field's URL name (`payload`, `result`, `error`, `traceback`, `log`).
        text: what the page shows: valid UTF-8, at most `DISPLAY_MAX_BYTES` of the value
            (or its indented JSON, at most twice that).
        size: the whole value's size (bytes).
        cut: True when `text` is only the first `DISPLAY_MAX_BYTES` of the value.
    """

    name: str
    text: str
    size: int
    cut: bool


def shown(name: str, head: str | None, size: int | None) -> Shown | None:
    """The `Shown` of field `name` from its stored prefix `head` (at least
    `DISPLAY_MAX_BYTES` characters of it, or all of it) and whole `size` in bytes; None
    for a NULL or empty value."""
    if not head:
        return None
    limit = limits.DISPLAY_MAX_BYTES
    size = size if size is not None else len(head.encode("utf-8", "surrogatepass"))
    cut = size > limit
    text = head_bytes(head, limit)
    if FIELDS[name][1] == "json" and not cut:
        pretty = pretty_json(text)
        if len(pretty) <= 2 * limit:
            text = pretty
    return Shown(name, valid_text(text), size, cut)


def page_row(conn: Connection, job_id: int) -> dict | None:
    """Row `job_id` for the Job page: every column, and under `shown` the `Shown` of each
    large text by URL name (absent when empty). None when there is no such row."""
    row = store.fields.job_heads(conn, job_id, limits.DISPLAY_MAX_BYTES)
    if row is None:
        return None
    row["shown"] = {}
    for name, (column, _suffix, _mime) in FIELDS.items():
        found = shown(name, row.pop(column), row.pop(column + "_bytes"))
        if found is not None:
            row["shown"][name] = found
    return row


@bp.get("/jobs/<id:job_id>/raw/<any(payload, result, error, traceback, log):field>")
def raw(job_id: int, field: str) -> Response:
    """The whole stored text of one field, as an attachment, streamed from the database
    in chunks (a NULL value is an empty file)."""
    app = cronjobs_app()
    column, suffix, mimetype = FIELDS[field]
    with app.engine.connect() as conn:
        exists, _size = store.fields.field_size(conn, job_id, column)
    if not exists:
        abort(404, f"no job with id {job_id}")
    body = store.fields.field_chunks(app.engine, job_id, column)
    return Response(body, mimetype=mimetype, headers={
        "Content-Disposition": f'attachment; filename="job-{job_id}-{field}.{suffix}"'})
