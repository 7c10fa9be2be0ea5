"""Flow control on the dashboard: the Pauses & blocks page (`/flow`: live pauses with
Resume, live blocks with Unblock, a Pause form, the limits of queues and types, the rows
held now) and its actions. Every action is a POST with the session's CSRF token, shown
first on a confirmation page (`/flow/confirm`); bad input is a 400 naming the field and
the value, an unknown pause or block a 404, and nothing is written then.
"""

from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, redirect, render_template, request, url_for
from flask_babel import gettext as _

from .. import durations, limits, store
from ..actions import operator
from ..errors import InvalidJob
from ..flow.state import held_now, queue_limits, type_limits
from ..schedule.entries import schedule_tasks
from .auth import who
from .scopes import requires
from .view import cronjobs_app, handler_registry

bp = Blueprint("flow", __name__)
ACTIONS = ("pause", "resume", "unblock")
SCOPES = ("queue", "type", "task")
DURATION_MAX = timedelta(seconds=durations.YEAR_SECONDS)


def parse_duration(text: str | None) -> timedelta | None:
    """The Pause form's duration: `90s`, `30m`, `2h`, `1d` (a bare number is seconds, as
    in `cronjobs pause --for`); empty: None (until resumed).

    Raises:
        InvalidJob: not one of those forms, 0, or over a year; the message shows it.
    """
    if text is None or not text.strip():
        return None
    try:
        return timedelta(seconds=durations.seconds(text, name="duration"))
    except ValueError:
        raise InvalidJob(f"duration must be such as 90s, 30m, 2h or 1d (more than 0, at most "
                         f"a year), got {text[:40]!r}") from None


def _targets(app) -> dict[str, list[str]]:
    """What may be paused: the known queues, job types and tasks (sorted)."""
    registry = handler_registry(app)
    return {"queue": sorted(set(app.queues()) | set(queue_limits(app))),
            "type": sorted(registry.registered_handlers()), "task": sorted(schedule_tasks(app))}


def pause_form(form) -> dict:
    """The pause a form asks for: `{"scope", "name", "for": timedelta | None, "reason"}`.
    A name no handler of this dashboard has is paused all the same (as `cronjobs pause`
    does: the workers that run it may have handlers this process has not); the
    confirmation page warns about it (`_confirm_fields`).

    Raises:
        InvalidJob: an unknown scope, a name that breaks the naming rules, a bad duration,
            or a reason over its limit.
    """
    scope, name = form.get("scope", ""), (form.get("name") or "").strip()
    if scope not in SCOPES:
        raise InvalidJob(f"scope must be queue, type or task, got {scope[:40]!r}")
    store.flow.check_target(scope, name)
    reason = limits.check_flow_reason((form.get("reason") or "").strip() or None)
    return {"scope": scope, "name": name, "for": parse_duration(form.get("for")),
            "reason": reason}


def _page(error: str | None = None, code: int = 200, form=None):
    app = cronjobs_app()
    now = app.clock.now()
    with app.engine.connect() as conn:
        now = store.flow.flow_now(conn, app.clock)  # what the claims judge with
        pauses = store.flow.list_pauses(conn, now)
        blocks = store.flow.list_blocks(conn, now)
        held = held_now(app, conn, now, pauses, blocks)
    return render_template("flow.html", pauses=pauses, blocks=blocks, held=held,
                           types=type_limits(app), queues=queue_limits(app),
                           targets=_targets(app), error=error, form=form or {}, now=now), code


@bp.get("/flow")
def index():
    """The Pauses & blocks page."""
    return _page()


@bp.post("/flow/confirm")
@requires("operate")
def confirm():
    """The confirmation page of an action (form `action`: pause, resume or unblock, and
    its fields); nothing is changed until its button is pressed."""
    action = request.form.get("action", "")
    if action not in ACTIONS:
        return _page(_("Refused: %(reason)s", reason=f"action must be pause, resume or "
                                                      f"unblock, got {action[:40]!r}"), 400)
    try:
        fields, unknown = _confirm_fields(action, request.form)
    except InvalidJob as exc:
        return _page(_("Refused: %(reason)s", reason=str(exc)), 400, request.form)
    return render_template("flow_confirm.html", action=action, fields=fields, unknown=unknown)


def _confirm_fields(action: str, form) -> tuple[dict, bool]:
    """The fields the confirmation page carries on, checked, and whether a pause names
    what no handler of this dashboard has (the page warns: a typo?)."""
    if action == "pause":
        wanted = pause_form(form)
        unknown = wanted["name"] not in _targets(cronjobs_app())[wanted["scope"]]
        return {"scope": wanted["scope"], "name": wanted["name"],
                "for": (form.get("for") or "").strip(),
                "reason": wanted["reason"] or ""}, unknown
    if action == "resume":
        return {"scope": _scope(form), "name": form.get("name", "")}, False
    return {"block": str(_block_id(form))}, False


@bp.post("/flow/pause")
@requires("operate")
def pause():
    """Pause a queue, a type or a task (form: `scope`, `name`, optional `for` and
    `reason`); a pause of the same target is replaced. Then back to the page."""
    try:
        wanted = pause_form(request.form)
    except InvalidJob as exc:
        return _page(_("Refused: %(reason)s", reason=str(exc)), 400, request.form)
    app = cronjobs_app()
    by = limits.by_address(who(), request.remote_addr)
    with app.engine.begin() as conn:
        now = store.flow.flow_now(conn, app.clock)  # `for` counts on the database's clock
        until = now + wanted["for"] if wanted["for"] else None
        store.flow.pause(conn, wanted["scope"], wanted["name"], now=now, until=until,
                         reason=wanted["reason"], by=by)
    return redirect(url_for("flow.index"), 303)


@bp.post("/flow/resume")
@requires("operate")
def resume():
    """Lift the pause of form `scope` and `name`; 404 when there is none."""
    try:
        scope = _scope(request.form)
    except InvalidJob as exc:
        return _page(_("Refused: %(reason)s", reason=str(exc)), 400)
    name = request.form.get("name", "")
    try:
        lifted = operator.resume(cronjobs_app(), scope, name)
    except InvalidJob as exc:
        return _page(_("Refused: %(reason)s", reason=str(exc)), 400)
    if not lifted:
        return _page(_("No pause of %(scope)s %(name)s.", scope=_(scope), name=name[:80]), 404)
    return redirect(url_for("flow.index"), 303)


@bp.post("/flow/unblock")
@requires("operate")
def unblock():
    """Lift block form `block` (its id) before its end; 404 when there is none."""
    try:
        block_id = _block_id(request.form)
    except InvalidJob as exc:
        return _page(_("Refused: %(reason)s", reason=str(exc)), 400)
    lifted = operator.unblock(cronjobs_app(), block_id)
    if not lifted:
        return _page(_("No block #%(id)s (it may have ended).", id=block_id), 404)
    return redirect(url_for("flow.index"), 303)


def _scope(form) -> str:
    scope = form.get("scope", "")
    if scope not in SCOPES:
        raise InvalidJob(f"scope must be queue, type or task, got {scope[:40]!r}")
    return scope


def _block_id(form) -> int:
    text = form.get("block", "")
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 2**63:
        raise InvalidJob(f"block must be a block id (a positive whole number), got {text[:40]!r}")
    return int(text)
