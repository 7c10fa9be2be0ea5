"""Tasks page (`/tasks`: every task with its schedule state, kill switch and Run now) and
the page of one task (`/tasks/NAME`: settings, next fire times, the last 50 runs with a
duration chart and success rate, Run now with an optional JSON payload)."""

from __future__ import annotations

import json
import statistics

from flask import Blueprint, abort, redirect, render_template, request, url_for
from flask_babel import format_percent
from flask_babel import gettext as _

from .. import limits, store
from ..errors import InvalidJob, TaskRefused, TaskRunning
from ..family.view import Family, read_families
from ..flow.state import TaskFlow, task_flows
from ..handler import stage_of
from ..schedule.entries import schedule_tasks
from ..schedule.manual import new_request_token, run_now
from ..schedule.slots import describe
from ..schedule.taskrows import TaskRow, next_runs, task_rows
from ..schedule.tasks import set_enabled
from ..status import Status
from . import charts
from .auth import who
from .scopes import requires, type_refusal
from .view import cronjobs_app, handler_registry, page_now

bp = Blueprint("tasks", __name__)
RUNS_SHOWN = 50
FIRES_SHOWN = 5


def frequency_text(frequency: str | None) -> str:
    """A frequency in the page's language: `every minute` ... `every month` for the named
    ones, a cron line (a macro with its expansion) as it is; `""` for None."""
    words = {"minute": _("every minute"), "hour": _("every hour"), "day": _("every day"),
             "month": _("every month")}
    return words.get(frequency or "", describe(frequency))


def _gone(rows: list[TaskRow]) -> set[int]:
    """Ids of last runs (scheduled or manual) whose row no longer exists."""
    ids = {i for r in rows for i in (r.last_job_id, r.last_manual_job_id) if i}
    with cronjobs_app().engine.connect() as conn:
        return ids - set(store.views.job_statuses(conn, sorted(ids)))


def flows_of(app, rows: list[TaskRow]) -> dict[str, TaskFlow]:
    """Flow control of the tasks `rows` (limits, overlap, the pauses holding them) now."""
    with app.engine.connect() as conn:
        pauses = store.flow.list_pauses(conn, store.flow.flow_now(conn, app.clock))
    return task_flows(app, {r.task: (r.type, *(t for t in r.types if t != r.type))
                            for r in rows}, pauses)


def _page(error: str | None = None, code: int = 200):
    app = cronjobs_app()
    rows = task_rows(app)
    return render_template("tasks.html", rows=rows, error=error, gone=_gone(rows),
                           flows=flows_of(app, rows),
                           tokens={r.task: new_request_token() for r in rows}), code


@bp.get("/tasks")
def index():
    """The Tasks page."""
    return _page()


def _task_row(task: str) -> TaskRow:
    row = next((r for r in task_rows(cronjobs_app()) if r.task == task), None)
    if row is None:  # handlers are loaded at the start: a task added since needs a restart
        abort(404, f"unknown task {task!r} (a task whose handler was added after this "
                   f"dashboard started appears once the dashboard is restarted)")
    return row


def run_seconds(run: dict, fam: Family | None = None) -> float | None:
    """How long a run took: its family's duration when it has rows under it (from the
    root's start to the family's last finish), else the row's own; None when unknown."""
    if fam is not None and fam.total and fam.duration_seconds is not None:
        return fam.duration_seconds
    start, end = run["started_at"], run["finished_at"]
    return (end - start).total_seconds() if start and end and end >= start else None


def run_ended(run: dict, fam: Family | None = None) -> bool | None:
    """Whether a run succeeded, by its family: True when its family's last completion's
    outcome is `success` (or, before a completion is recorded, when the root completed,
    every row under it finished and none failed), False when it ended otherwise, None
    while it has not ended (the root or a row under it pending or running)."""
    if run["status"] not in (Status.COMPLETED, Status.FAILED):
        return None
    if fam is None or not fam.total and not fam.generation:
        return run["status"] == Status.COMPLETED
    if fam.generation:
        return fam.outcome == "success"
    if not fam.complete:
        return None
    return run["status"] == Status.COMPLETED and not fam.counts.get(Status.FAILED)


def run_stats(runs: list[dict], families: dict[int, Family] | None = None) -> dict:
    """Success rate and durations of finished runs (rows of `views.list_rows`), by their
    families when given (`run_ended`, `run_seconds`).

    Returns:
        `{"finished": n, "completed": n, "rate": fraction or None, "median": seconds or
        None, "longest": seconds or None}` over the runs that ended.
    """
    families = families or {}
    ended = [r for r in runs if run_ended(r, families.get(r["id"])) is not None]
    done = [r for r in ended if run_ended(r, families.get(r["id"]))]
    seconds = [s for r in ended if (s := run_seconds(r, families.get(r["id"]))) is not None]
    return {"finished": len(ended), "completed": len(done),
            "rate": len(done) / len(ended) if ended else None,
            "median": statistics.median(seconds) if seconds else None,
            "longest": max(seconds) if seconds else None}


def duration_chart(runs: list[dict], families: dict[int, Family] | None = None):
    """Bars of the runs' durations (their families' when they have one: `run_seconds`),
    oldest left, coloured by outcome (a family with a failed row is a failure)."""
    families = families or {}
    columns = []
    for r in reversed(runs):
        fam = families.get(r["id"])
        seconds = run_seconds(r, fam) or 0.0
        ok = run_ended(r, fam)
        shade = r["status"] if ok is None or r["status"] != Status.COMPLETED else (
            "completed" if ok else "failed")
        tip = _("#%(id)s %(status)s, %(seconds)s s", id=r["id"], status=_(r["status"]),
                seconds=f"{seconds:.3f}")
        columns.append(charts.Column([(seconds, f"seg-{shade}")], tip))
    return charts.bars(columns, label=_("Duration of the last runs"), unit=" s",
                       chart_id="chart-durations")


def example_payload(cls: type | None) -> str:
    """The Run now box's placeholder: the handler's `EXAMPLE_PAYLOAD` as JSON, or `{}` (no
    handler here, no example, or an example that is not a JSON object)."""
    example = getattr(cls, "EXAMPLE_PAYLOAD", None)
    if not isinstance(example, dict):
        return "{}"
    try:
        return json.dumps(example, ensure_ascii=False)
    except (TypeError, ValueError):  # a value JSON cannot hold
        return "{}"


def other_types(app, row: TaskRow) -> list[tuple[str, type]]:
    """The task's types other than the one it starts, with their handler classes (those
    this dashboard has): a discover task's executes, whose limits the Settings box shows."""
    registry = handler_registry(app)
    found = [(t, registry.resolve_handler(t)) for t in row.types if t != row.type]
    return [(t, cls) for t, cls in found if cls is not None]


def _entry_title(task: str) -> str | None:
    """The title prefix of a schedule entry's runs (`report:tr `: its slots and its manual
    runs; the entries of one handler share its type), None for a handler's own task."""
    return f"{task} " if ":" in task else None


def _task_page(task: str, error: str | None = None, payload_text: str = "", code: int = 200):
    app = cronjobs_app()
    row = _task_row(task)
    cls = handler_registry(app).resolve_handler(row.type)
    with app.engine.connect() as conn:
        runs = store.views.list_rows(conn, types=[row.type], limit=RUNS_SHOWN,
                                     title=_entry_title(row.task)).rows
        discover = [r["id"] for r in runs if stage_of(r["type"]) == "discover"]
        children = store.views.children_counts(conn, discover)
        families = read_families(conn, [r["id"] for r in runs])
    return render_template(
        "task.html", t=row, cls=cls, runs=runs, children=children, families=families,
        other_types=other_types(app, row), error=error,
        payload_text=payload_text, example_payload=example_payload(cls),
        zone=row.timezone,
        fires=[] if row.idle else next_runs(  # an idle task starts no slot
            row.task, row.frequency, page_now(), row.timezone, jitter=row.jitter,
            spread=row.spread, skipped=row.last_skipped_slot, n=FIRES_SHOWN),
        stats=run_stats(runs, families), chart=duration_chart(runs, families),
        gone=_gone([row]), token=new_request_token(),
        flow=flows_of(app, [row])[row.task],
        payload_limit=limits.PAYLOAD_MAX_BYTES), code


@bp.get("/tasks/<task>")
def task(task: str):
    """One task: settings, next fire times, last runs, duration chart, Run now."""
    return _task_page(task)


def parse_payload(text: str) -> dict | None:
    """The Run now form's payload: None when empty, else a JSON object.

    Raises:
        InvalidJob: the text is larger than `PAYLOAD_MAX_BYTES`, not JSON, nested deeper
            than `JSON_MAX_DEPTH`, or not an object; the message says which.
    """
    if not text.strip():
        return None
    limits.check_json_size(text, "payload", limits.PAYLOAD_MAX_BYTES)
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidJob(f"payload is nested more than {limits.JSON_MAX_DEPTH} levels deep; "
                         f"the limit is {limits.JSON_MAX_DEPTH}") from None
    except ValueError as exc:
        raise InvalidJob(f"payload is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidJob(f'payload must be a JSON object ({{"key": "value"}}), got '
                         f"{type(value).__name__}")
    limits.check_json_depth(value, "payload")
    return value


@bp.post("/tasks/<task>/run")
@requires("operate")
def run(task: str):
    """Run now: one row per request token (a double click is one row), then the row's page.

    Form: `request_token`; `payload` (optional JSON object, from the task's page); `back`
    = `task` to answer a refusal with the task's page; `force` = `1` to start it while
    its scheduled run is still going (OVERLAP skip). A bad payload is a 400 naming the
    reason, and nothing is dispatched. A task still running is answered with a confirm
    page (409) whose button sends the same request with `force`. A payload for a type
    whose DISPATCH_SCOPE is above the token's (an operate token, a built-in type) is 403.
    """
    app = cronjobs_app()
    if task not in schedule_tasks(app):
        abort(404, f"unknown task {task!r}")
    from_task_page = request.form.get("back") == "task"
    text = request.form.get("payload") or ""
    if text.strip() not in ("", "{}") and (refused := type_refusal(app, schedule_tasks(app)[task])):
        abort(403, f"{refused}; without a payload, operate may run it")
    try:
        started = run_now(task, request_token=request.form.get("request_token") or None,
                          again=True, payload=parse_payload(text),
                          force=request.form.get("force") == "1", app=app, who=who())
    except TaskRunning as exc:
        return render_template("task_running.html", task=task, job_id=exc.job_id,
                               form=request.form), 409
    except InvalidJob as exc:
        return _task_page(task, _("Run now refused: %(reason)s", reason=str(exc)), text, 400)
    except TaskRefused as exc:
        message = _("Run now refused: %(reason)s", reason=str(exc))
        return _task_page(task, message, text, 409) if from_task_page else _page(message, 409)
    return redirect(url_for("jobs.job", job_id=started.id), 303)


@bp.post("/tasks/<task>/enabled")
@requires("operate")
def enabled(task: str):
    """The kill switch: form field `enabled` = `1` (on) or `0` (off); back to the page it
    came from (`back` = `task`: the task's page)."""
    app = cronjobs_app()
    if task not in schedule_tasks(app):
        abort(404, f"unknown task {task!r}")
    value = request.form.get("enabled")
    if value not in ("0", "1"):
        abort(400, f"enabled must be 0 or 1, got {value!r}")
    set_enabled(task, value == "1", app=app, who=who())
    if request.form.get("back") == "task":
        return redirect(url_for("tasks.task", task=task), 303)
    return redirect(url_for("tasks.index"), 303)


def install(web) -> None:
    """Template filters of the task pages: `frequency` (in the page's language), `percent`."""
    web.jinja_env.filters.update(frequency=frequency_text, percent=format_percent)
