"""A minimal HTTP front (the full dashboard is a later issue): health, tasks and rows.

Routes: `GET /health` (no token), `GET /` (HTML overview), `GET /api/tasks`,
`GET /api/jobs?status=&type=&parent=&limit=&offset=`, `GET /api/jobs/<id>`. When
`dashboard_token` is set, every route but /health needs `Authorization: Bearer <token>`
or `?token=<token>`.
"""

from __future__ import annotations

import hmac
import time
from datetime import datetime

from flask import Flask, abort, jsonify, render_template_string, request
from sqlalchemy import text

from . import store
from .app import App
from .scheduler import task_infos

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>cronjobs</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}</style></head><body>
<h1>cronjobs</h1><h2>Tasks</h2><table><tr><th>task</th><th>type</th><th>frequency</th>
<th>enabled</th><th>last run</th><th>next run</th><th>last status</th></tr>
{% for t in tasks %}<tr><td>{{t.task}}</td><td>{{t.type}}</td><td>{{t.frequency or ''}}</td>
<td>{{t.enabled}}</td><td>{{t.last_run_at or ''}}</td><td>{{t.next_run_at or ''}}</td>
<td>{{t.last_status or ''}}</td></tr>{% endfor %}</table>
<h2>Recent jobs</h2><table><tr><th>id</th><th>type</th><th>status</th><th>attempts</th>
<th>created</th><th>error</th></tr>{% for j in jobs %}<tr><td>{{j.id}}</td><td>{{j.type}}</td>
<td>{{j.status}}</td><td>{{j.attempts}}/{{j.max_attempts}}</td><td>{{j.created_at}}</td>
<td>{{j.error or ''}}</td></tr>{% endfor %}</table></body></html>"""


def _json(value):  # noqa: ANN001, ANN202
    if isinstance(value, datetime):
        return value.isoformat() + "Z"
    return value


def _clean(row: dict) -> dict:
    return {k: _json(v) for k, v in row.items()}


def create_app(app: App) -> Flask:
    """Build the Flask application serving `app`'s database."""
    web = Flask("cronjobs")

    @web.before_request
    def check_token() -> None:
        token = app.settings.dashboard_token
        if not token or request.path == "/health":
            return
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        given = given or request.args.get("token", "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            abort(401)

    @web.get("/health")
    def health():  # noqa: ANN202
        started = time.monotonic()
        try:
            with app.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception:
            return jsonify(status="fail"), 503
        return jsonify(status="ok", db_ms=round((time.monotonic() - started) * 1000, 1))

    def tasks() -> list[dict]:
        return [{"task": i.task, "type": i.type, "frequency": i.frequency,
                 "enabled": i.enabled, "available": i.available,
                 **{k: _json(i.runtime.get(k)) for k in
                    ("last_run_at", "next_run_at", "last_slot", "last_job_id", "last_status")}}
                for i in task_infos(app)]

    def jobs(limit: int = 50) -> list[dict]:
        args = request.args
        try:
            limit = min(int(args.get("limit", limit)), 500)
            offset = int(args.get("offset", 0))
            parent = int(args["parent"]) if args.get("parent") else None
        except ValueError:
            abort(400, "limit, offset and parent must be integers")
        with app.engine.connect() as conn:
            return [_clean(r) for r in store.list_jobs(
                conn, status=args.get("status") or None, type=args.get("type") or None,
                parent_id=parent, limit=limit, offset=offset)]

    @web.get("/")
    def index():  # noqa: ANN202
        return render_template_string(PAGE, tasks=tasks(), jobs=jobs(30))

    @web.get("/api/tasks")
    def api_tasks():  # noqa: ANN202
        return jsonify(tasks())

    @web.get("/api/jobs")
    def api_jobs():  # noqa: ANN202
        return jsonify(jobs())

    @web.get("/api/jobs/<int:job_id>")
    def api_job(job_id: int):  # noqa: ANN202
        with app.engine.connect() as conn:
            row = store.get_job(conn, job_id)
        if row is None:
            abort(404)
        return jsonify(_clean(row))

    return web
