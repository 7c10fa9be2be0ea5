"""Overview page (`/`, the landing page) and its JSON (`/api/overview`): rows finished per
minute over the last hour and per hour over the last day (completed, failed, retries),
queue depth and the oldest due row per queue, busy slots and live workers.

The numbers come from `store.stats` (index ranges only). One snapshot serves every request
for `CACHE_SECONDS` (3 s; `CRONJOBS_OVERVIEW_CACHE_SECONDS` in the Flask config), and an
hour that ended more than `HOUR_SETTLED_SECONDS` ago is read once per process and kept: a
refresh reads the last hour per minute, the open hour, the queues and the heartbeats.
The page polls `/api/overview` (`static/live.js`); without JavaScript it has a Refresh link.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from flask import Blueprint, current_app, jsonify, render_template
from flask_babel import gettext as _

from .. import store
from ..flow.state import held_by_queue, held_now, untaken
from ..store import stats
from ..worker.heartbeat import LIVE_SECONDS
from . import charts
from .openapi import operation
from .view import cronjobs_app

bp = Blueprint("overview", __name__)
CACHE_SECONDS = 3.0
HOUR_SETTLED_SECONDS = 120  # rows finishing at 12:59:59 may be written a little later
POLL_SECONDS = 5
_lock = threading.Lock()


def _floor(now: datetime, seconds: int) -> datetime:
    """`now` rounded down to a whole `seconds` (60: the minute, 3600: the hour)."""
    start = now.replace(minute=0, second=0, microsecond=0)
    return start + timedelta(seconds=(now - start).total_seconds() // seconds * seconds)


def _state() -> dict:
    return current_app.extensions.setdefault("cronjobs_overview", {"hours": {}, "snap": None})


def _hours(conn, now: datetime) -> list[dict]:
    """The last 24 hours, per hour: settled hours from memory (read once), the rest now."""
    first = _floor(now, 3600) - timedelta(hours=23)
    starts = [first + timedelta(hours=i) for i in range(24)]
    settled = [s for s in starts if s + timedelta(seconds=3600 + HOUR_SETTLED_SECONDS) <= now]
    with _lock:
        kept = {s: b for s, b in _state()["hours"].items() if s >= first}
    missing = [s for s in settled if s not in kept]
    if missing:
        span = int((missing[-1] - missing[0]).total_seconds() // 3600) + 1
        for bucket in stats.finished_buckets(conn, missing[0], 3600, span):
            kept[bucket["at"]] = bucket
    open_hours = starts[len(settled):]
    fresh = stats.finished_buckets(conn, open_hours[0], 3600, len(open_hours))
    with _lock:
        _state()["hours"] = kept
    return [kept[s] for s in settled] + fresh


def _total(buckets: list[dict]) -> dict:
    return {key: sum(b[key] for b in buckets) for key in ("completed", "failed", "retried")}


def snapshot() -> dict:
    """The Overview's numbers, at most `CACHE_SECONDS` old.

    Returns:
        `{"now", "minutes": [bucket] (60, oldest first), "hours": [bucket] (24),
        "last_hour"/"last_day": {"completed", "failed", "retried"}, "queues":
        stats.queue_stats(...), "busy": stats.busy(...)}`; a bucket is
        `{"at", "completed", "failed", "retried"}` (see `stats.finished_buckets`). Each
        queue also has `held` (why its due rows wait: `flowstate.held_by_queue`) and
        `free` (its due rows nothing holds, which wait for a slot; None when `due` is
        capped) and `untaken` (no live worker takes the queue: its due rows wait for one,
        whatever else holds them).
    """
    app = cronjobs_app()
    now = app.clock.now()
    ttl = current_app.config.get("CRONJOBS_OVERVIEW_CACHE_SECONDS", CACHE_SECONDS)
    with _lock:
        snap = _state()["snap"]
    if snap and 0 <= (now - snap["now"]).total_seconds() < ttl:
        return snap
    with app.engine.connect() as conn:
        minutes = stats.finished_buckets(conn, _floor(now, 60) - timedelta(minutes=59), 60, 60)
        hours = _hours(conn, now)
        snap = {"now": now, "minutes": minutes, "hours": hours, "last_hour": _total(minutes),
                "last_day": _total(hours), "busy": stats.busy(conn, LIVE_SECONDS)}
        snap["queues"] = _with_held(stats.queue_stats(conn, now), _held(app, conn, now),
                                    snap["busy"]["live"])
    with _lock:
        _state()["snap"] = snap
    return snap


def _with_held(queues: dict, held: list[dict], live: list[dict]) -> dict:
    """`stats.queue_stats` with each queue's `held`, `free` and `untaken` (see
    `snapshot`); `live`: the live workers' heartbeat rows."""
    by_queue = held_by_queue(held)
    for qs in queues["queues"]:
        qs["untaken"] = untaken(qs["queue"], live)
        qs["held"] = by_queue.get(qs["queue"], [])
        due, capped = qs["due"]
        qs["free"] = None if capped else max(0, due - sum(h["rows"] for h in qs["held"]))
    return queues


def chart(buckets: list[dict], label_format: str, label: str, chart_id: str):
    """The SVG of a series: completed, failed and expired stacked, retries as dots."""
    columns = []
    for b in buckets:
        tip = _("%(at)s UTC: %(completed)s completed, %(failed)s failed, %(retried)s retries",
                at=b["at"].strftime(label_format), completed=b["completed"],
                failed=b["failed"], retried=b["retried"])
        if b.get("expired"):
            tip += "; " + _("%(n)s expired", n=b["expired"])
        columns.append(charts.Column([(b["completed"], "seg-completed"),
                                      (b["failed"], "seg-failed"),
                                      (b.get("expired", 0), "seg-expired")], tip,
                                     b["at"].strftime(label_format), b["retried"] or None))
    return charts.bars(columns, label=label, chart_id=chart_id)


def _page_data() -> dict:
    snap = snapshot()
    return {"snap": snap,
            "hour_chart": chart(snap["minutes"], "%H:%M",
                                _("Rows finished per minute, last hour"), "chart-hour"),
            "day_chart": chart(snap["hours"], "%H:00",
                               _("Rows finished per hour, last day"), "chart-day")}


@bp.get("/")
def index():
    """The Overview: charts, queues, workers; it updates itself every few seconds."""
    return render_template("overview.html", poll_seconds=POLL_SECONDS, **_page_data())


@bp.get("/api/overview")
def api():
    """The Overview's numbers as JSON, with `html`: the page's live part rendered again.

    Returns:
        `{"at", "last_hour", "last_day", "minutes", "hours", "queues": [...], "more_queues",
        "running": [n, capped], "workers": n, "html"}`; times are ISO 8601 UTC (`Z`).
    """
    data = _page_data()
    snap = data["snap"]
    iso = _iso
    return jsonify({
        "at": iso(snap["now"]), "last_hour": snap["last_hour"], "last_day": snap["last_day"],
        "minutes": [{**b, "at": iso(b["at"])} for b in snap["minutes"]],
        "hours": [{**b, "at": iso(b["at"])} for b in snap["hours"]],
        "queues": [{**qs, "oldest_due_at": iso(qs["oldest_due_at"])}
                   for qs in snap["queues"]["queues"]],
        "more_queues": snap["queues"]["more"], "running": snap["busy"]["running"],
        "workers": len(snap["busy"]["live"]),
        "html": render_template("_overview_live.html", **data)})


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() + "Z" if value else None


def _held(app, conn, now) -> list[dict]:
    """The due rows held now (`flowstate.held_now`), pauses and blocks judged as the claims
    judge them (`store.flow.flow_now`: the database's clock)."""
    at = store.flow.flow_now(conn, app.clock)
    return held_now(app, conn, at, store.flow.list_pauses(conn, at),
                    store.flow.list_blocks(conn, at))


OPENAPI: dict = {
    "/api/overview": {"get": operation("What the Overview page polls",
                                       {"200": "counts, speed and HTML"})},
}
