"""Bulk actions and their operations: the confirmation of a bulk retry, cancel or delete
(ticked rows, or all rows matching the Queue or Failed page's filter), its start, the
progress of an operation (refreshing while it runs) and Resume.

Every bulk button posts its form (with the CSRF token) to `/operations/confirm`, which
shows what would happen to how many rows and posts the same fields to `/operations`: the
start, where the snapshot is taken. Works without JavaScript; a second start of a
selection whose operation runs is refused (409, with that operation's progress).

The form's fields: `action` (retry, cancel, delete), `scope` (`ticked`: the `id` boxes
and the `page` box, which carries every id of its page; `all`: the filter), `source`
(`queue`: status, type, task, parent, queue, title, housekeeping; `failed`: type, group, a
row id of a Failed-page group; `family`: root, the family page's root row: its rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Blueprint, abort, redirect, render_template, request, url_for
from flask_babel import gettext as _
from werkzeug.datastructures import MultiDict

from .. import store
from ..actions import bulk
from ..actions.selection import Selection
from ..errors import OperationRunning
from ..job import failures
from ..status import Status
from .auth import who
from .jobs import queue_filters
from .scopes import requires
from .view import ROW_ID_MAX, cronjobs_app

bp = Blueprint("operations", __name__)

TICKED_MAX = 500  # ticked ids a form may carry: a page of the Queue holds at most 500 rows
QUEUE_FIELDS = ("status", "type", "task", "parent", "queue", "title", "housekeeping")
FAILED_FIELDS = ("type", "group")
FAMILY_FIELDS = ("root",)


@dataclass(frozen=True)
class BulkForm:
    """A bulk action's form, checked.

    Attributes:
        action: `retry`, `cancel` or `delete`.
        selection: the rows.
        fields: the form's fields to post again (normalised: ticked ids as `id`s).
        back: the page the form came from (its filters kept).
    """

    action: str
    selection: Selection
    fields: list[tuple[str, str]]
    back: str


def _ids(form: MultiDict) -> tuple[int, ...]:
    """The ticked ids: each `id`, and every id of a ticked `page` box (400 on bad input)."""
    raw = form.getlist("id") + [i for page in form.getlist("page") for i in page.split(",")]
    ids = set()
    for value in raw:
        value = value.strip()
        if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= ROW_ID_MAX:
            abort(400, f"a ticked row id must be a row id (1 to {ROW_ID_MAX}), got {value!r}")
        ids.add(int(value))
    if not ids:
        abort(400, _("No row is ticked: tick rows first, or use the buttons for all rows "
                     "matching the filter."))
    if len(ids) > TICKED_MAX:
        abort(400, f"{len(ids):,} rows are ticked; at most {TICKED_MAX} at once: use the "
                   "buttons for all rows matching the filter")
    return tuple(sorted(ids))


def group_selection(job_id: str | int, job_type: str | None = None) -> Selection:
    """The Failed-page group of failed row `job_id` (its type and fingerprint, named by
    its pattern: `failures.group_of`), or every failed row (of `job_type`) when `job_id`
    is empty (404 when the row is not failed).

    A group travels as one of its rows: form encoding turns newlines into CRLF, so a
    text would no longer match the stored one."""
    if job_id in ("", None):
        return Selection(Status.FAILED, job_type)
    try:
        number = int(job_id)
    except ValueError:
        abort(400, _("job must be a row id"))
    if not 1 <= number <= ROW_ID_MAX:
        abort(404, f"no failed job with id {number}")
    with cronjobs_app().engine.connect() as conn:
        group = failures.group_of(conn, number)
    if group is None:
        abort(404, f"no failed job with id {number}")
    return Selection(Status.FAILED, group["type"], group["pattern"], group["unmarked"])


def read_form(form: MultiDict) -> BulkForm:
    """The bulk action of a posted form (400 on bad input, 404 for a group gone)."""
    action = form.get("action", "")
    if action not in bulk.ACTIONS:
        abort(400, f"action must be one of {', '.join(bulk.ACTIONS)}, got {action!r}")
    source, scope = form.get("source", "queue"), form.get("scope", "")
    if source not in ("queue", "failed", "family") or scope not in ("ticked", "all"):
        abort(400, f"source must be queue, failed or family and scope ticked or all, got "
                   f"{source!r} and {scope!r}")
    names = {"queue": QUEUE_FIELDS, "failed": FAILED_FIELDS, "family": FAMILY_FIELDS}[source]
    kept = {n: form.get(n, "").strip() for n in names if form.get(n, "").strip()}
    if source == "family":
        return _family_form(action, scope, kept)
    back = (url_for("jobs.queue", **kept) if source == "queue"
            else url_for("failed.failed", **kept))
    fields = [("action", action), ("source", source), ("scope", scope), *kept.items()]
    if scope == "ticked":
        ids = _ids(form)
        return BulkForm(action, Selection(ids=ids), fields + [("id", str(i)) for i in ids],
                        back)
    if source == "failed":
        return BulkForm(action, group_selection(kept.get("group"), kept.get("type")),
                        fields, back)
    f = queue_filters(args=MultiDict(kept))
    selection = Selection(f["status"], types=tuple(f["types"] or ()), parent=f["parent"],
                          title=f["title"], hide=f["hide"], queue=f["queue"])
    return BulkForm(action, selection, fields, back)


def _family_form(action: str, scope: str, kept: dict) -> BulkForm:
    """The bulk action of the family page (Retry failed): the rows under root `root`."""
    root = kept.get("root", "")
    if scope != "all" or not root.isascii() or not root.isdigit() \
            or not 1 <= int(root) <= ROW_ID_MAX:
        abort(400, f"a family's action takes scope all and a root row id, got {scope!r} "
                   f"and {root!r}")
    fields = [("action", action), ("source", "family"), ("scope", scope), ("root", root)]
    return BulkForm(action, Selection(root=int(root)), fields,
                    url_for("family.page", job_id=int(root)))


def _refused(exc: OperationRunning):
    return render_template("operation.html", op=exc.operation, refused=True), 409


def _running(selection: Selection) -> dict | None:
    """The running (not stalled) operation of `selection`, or None."""
    with cronjobs_app().engine.connect() as conn:
        op = store.operations.running_operation(conn, selection.running_key())
    return op if op is not None and not op["stalled"] else None


@bp.post("/operations/confirm")
@requires("operate")
def confirm():
    """What the bulk action of the form would do, to how many rows now, with a button that
    starts it (the same fields, posted to `/operations`). 409 while an operation of the
    same selection runs; the count stops above `bulk.SNAPSHOT_MAX_ROWS` (then no button:
    the start would be refused)."""
    form = read_form(request.form)
    running = _running(form.selection)
    if running is not None:
        return _refused(OperationRunning(running))
    limit = bulk.SNAPSHOT_MAX_ROWS
    n, capped = bulk.preview(cronjobs_app(), form.action, form.selection, limit)
    return render_template("confirm.html", form=form, n=n, limit=limit,
                           too_large=bulk.too_large(form.action, limit) if capped else None,
                           statuses=bulk.ACTIONS[form.action].statuses)


@bp.post("/operations")
@requires("operate")
def start():
    """Start the bulk action of the form and open its operation's page.

    The snapshot of ids is taken here (at most `bulk.SNAPSHOT_MAX_ROWS`, else 400 and
    nothing recorded); the batches run in a background thread. An operation of the same
    selection already running (in any process) refuses this one: 409, with its progress.
    """
    form = read_form(request.form)
    return start_operation(form.action, form.selection)


def start_operation(action: str, selection: Selection):
    """Start `action` on `selection` in the background: a redirect to its page, or 409."""
    app = cronjobs_app()
    try:
        started = bulk.start(app, action, selection, who=who(),
                             max_rows=bulk.SNAPSHOT_MAX_ROWS)
    except OperationRunning as exc:
        return _refused(exc)
    if started.operation["status"] == "running":
        bulk.run_in_background(app, started)
    return redirect(url_for("operations.operation", operation_id=started.operation["id"]), 303)


@bp.get("/operations/<int:operation_id>")
def operation(operation_id: int):
    """Progress of operation `operation_id`; the page refreshes while it runs."""
    op = bulk.get(cronjobs_app(), operation_id)
    if op is None:
        abort(404, f"no operation with id {operation_id}")
    return render_template("operation.html", op=op, refused=False,
                           refresh=op["status"] == "running" and not op["stalled"])


@bp.post("/operations/<int:operation_id>/resume")
@requires("operate")
def resume(operation_id: int):
    """Take over a stalled operation and run its batches left in the background."""
    app = cronjobs_app()
    if bulk.get(app, operation_id) is None:
        abort(404, f"no operation with id {operation_id}")
    try:
        started = bulk.resume(app, operation_id)
    except OperationRunning as exc:
        return _refused(exc)
    bulk.run_in_background(app, started)
    return redirect(url_for("operations.operation", operation_id=operation_id), 303)
