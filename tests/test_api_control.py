"""The operator's POST routes over HTTP (issue 40 §1), JSON in and out with a Bearer token
of scope `operate`: retry, cancel, stop, run a task now, pause, resume, unblock; 404 an
unknown row, task, pause or block, 409 the wrong state, 400 a bad body; nothing written
on a refusal; each recorded with the token's name."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest

from cronjobs import store
from cronjobs.store import tokens
from cronjobs.web import create_app
from dashboard_helpers import TOKEN, add_row, count, row

pytestmark = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)


@pytest.fixture
def api(make_app):
    app = make_app(dashboard_token=TOKEN)
    with app.engine.begin() as conn:
        token = tokens.create(conn, "ops", "operate", app.clock.now())
    client = create_app(app).test_client()
    headers = {"Authorization": f"Bearer {token}"}

    def post(path: str, body=None, raw: str | None = None, ctype="application/json"):
        if raw is not None:
            return client.post(path, data=raw, headers={**headers, "Content-Type": ctype})
        return client.post(path, json=body, headers=headers)
    return app, post


def error(resp) -> str:
    assert resp.is_json, resp.get_data(as_text=True)[:300]
    return resp.get_json()["error"]


def test_row_actions_answer_json_with_404_and_409(api):
    app, post = api
    failed = add_row(app, status="failed", error="boom")
    pending = add_row(app)
    running = add_row(app, status="running", attempts=1, worker_id="w-1",
                      started_at=app.clock.now())
    assert post(f"/api/jobs/{failed}/retry").get_json() == {"id": failed, "status": "pending"}
    resp = post(f"/api/jobs/{failed}/retry")
    assert resp.status_code == 409 and "only failed rows can be retried" in error(resp)
    assert post("/api/jobs/999999999/retry").status_code == 404
    assert post(f"/api/jobs/{pending}/cancel").get_json() == {"id": pending,
                                                              "status": "cancelled"}
    assert "cancelled by token:ops" in row(app, pending)["process_logs"]
    assert post(f"/api/jobs/{running}/cancel").status_code == 409
    assert row(app, running)["status"] == "running"
    resp = post(f"/api/jobs/{running}/stop")
    assert resp.status_code == 200 and resp.get_json()["stop_requested"] is True
    assert resp.get_json()["worker_id"] == "w-1"
    resp = post(f"/api/jobs/{pending}/stop")
    assert resp.status_code == 409 and "only running rows can be stopped" in error(resp)
    assert post("/api/jobs/999999999/stop").status_code == 404


def test_run_a_task_now(api):
    app, post = api
    resp = post("/api/tasks/test-count/run", {"payload": {"n": 1}, "request_token": "abcdefgh1"})
    assert resp.status_code == 201, resp.get_data(as_text=True)
    made = resp.get_json()
    assert made["created"] is True and '"n": 1' in row(app, made["id"])["payload"]
    again = post("/api/tasks/test-count/run", {"request_token": "abcdefgh1"})
    assert again.status_code == 200 and again.get_json() == {"id": made["id"], "created": False}
    assert post("/api/tasks/test-count/run", raw="").status_code == 201  # no body: fine
    rows = count(app, type=row(app, made["id"])["type"])
    for body, code, words in [
        ({"payload": [1]}, 400, "payload must be a JSON object"),
        ({"payload": {"a": 1}, "extra": 1}, 400, "unknown field 'extra'"),
        ({"force": "yes"}, 400, "force must be a JSON boolean"),
        ("{not json", 400, "the body is not valid JSON"),
        ("[" * 5000 + "]" * 5000, 400, "nested"),
    ]:
        resp = post("/api/tasks/test-count/run", raw=body) if isinstance(body, str) else \
            post("/api/tasks/test-count/run", body)
        assert resp.status_code == code and words in error(resp), (body, resp.get_data())
    assert count(app, type=row(app, made["id"])["type"]) == rows  # nothing dispatched
    resp = post("/api/tasks/no-such-task/run")
    assert resp.status_code == 404 and "unknown task 'no-such-task'" in error(resp)


def test_pause_resume_and_unblock(api):
    app, post = api
    resp = post("/api/pauses", {"type": "test.summary.execute", "for": "30m", "reason": "db"})
    assert resp.status_code == 201, resp.get_data(as_text=True)
    pause = resp.get_json()
    assert pause["scope"] == "type" and pause["name"] == "test.summary.execute"
    assert pause["created_by"] == "token:ops" and pause["reason"] == "db"
    for body, words in [({}, "name exactly one of queue, type or task"),
                        ({"queue": "a", "task": "b"}, "name exactly one"),
                        ({"queue": "emails", "for": "soon"}, "duration must be such as"),
                        ({"queue": 5}, "queue must be a JSON string")]:
        resp = post("/api/pauses", body)
        assert resp.status_code == 400 and words in error(resp), body
    with app.engine.connect() as conn:
        assert len(store.flow.list_pauses(conn, app.clock.now())) == 1
    assert post("/api/pauses/resume", {"type": "test.summary.execute"}).get_json() == {
        "scope": "type", "name": "test.summary.execute", "resumed": True}
    resp = post("/api/pauses/resume", {"type": "test.summary.execute"})
    assert resp.status_code == 404 and "no pause of type" in error(resp)
    now = app.clock.now()
    with app.engine.begin() as conn:
        made = store.flow.block(conn, "test.summary.execute", "k1", now=now,
                                until=now + timedelta(hours=1))
        store.flow.block(conn, "test.summary.execute", None, now=now,
                         until=now + timedelta(hours=1))
    assert post("/api/blocks/unblock", {"id": made["id"]}).get_json() == {"unblocked": True}
    assert post("/api/blocks/unblock", {"id": made["id"]}).status_code == 404
    assert post("/api/blocks/unblock", {"type": "test.summary.execute"}).status_code == 200
    for body in ({}, {"id": 1, "type": "x"}, {"id": 0}, {"id": True}, {"id": 1, "key": "k"}):
        assert post("/api/blocks/unblock", body).status_code == 400, body


def test_bodies_need_json_limits_and_a_warning_for_unknown_names(api):
    app, post = api
    chunked = {"wsgi.input_terminated": True}  # a chunked body: no Content-Length
    for path in ("/api/tasks/test-count/run", "/api/pauses", "/api/pauses/resume",
                 "/api/blocks/unblock"):
        resp = post(path, raw='{"queue": "q"}', ctype="text/plain")
        assert resp.status_code == 415 and "Content-Type: application/json" in error(resp)
        resp = post(path, raw='{"n": 1' + "0" * 5000 + "}")  # over Python's digit limit
        assert resp.status_code == 400 and "not valid JSON" in error(resp), path
    client = create_app(app).test_client()
    big = b'{"queue": "q"}' + b" " * (64 * 1024)
    resp = client.post("/api/pauses", input_stream=io.BytesIO(big),
                       headers={"Authorization": f"Bearer {TOKEN}",
                                "Content-Type": "application/json"},
                       environ_overrides=chunked)
    assert resp.status_code == 413 and "limit" in error(resp)
    assert post("/api/tasks/test-count/run", raw="", ctype="text/plain").status_code == 201
    resp = post("/api/pauses", raw="null")
    assert resp.status_code == 400 and error(resp).endswith("got null")
    resp = post("/api/pauses", {"type": "test.sumary.execute"})
    assert resp.status_code == 201
    assert "no registered handler has type 'test.sumary.execute' (a typo?)" in resp.get_json(
        )["warning"]
    assert "warning" not in post("/api/pauses", {"type": "test.summary.execute"}).get_json()
    with app.engine.connect() as conn:
        assert len(store.flow.list_pauses(conn, app.clock.now())) == 2
