"""Dashboard auth: token or login session on every page, JSON route and
action; CSRF on every POST from a session; no state change by GET; no CORS; /health
answers only its status without the token; the token rule for listening."""

from __future__ import annotations

import pytest

from cronjobs.errors import ConfigError
from cronjobs.schedule.tasks import task_infos
from cronjobs.store.models import cronjob_runtime
from cronjobs.web.server import ensure_token, is_loopback
from dashboard_helpers import BEARER, TOKEN, add_row, count, csrf_of, login, row, web_client

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
PAGES = ["/", "/queue", "/queue?status=failed", "/jobs/{id}", "/jobs/{id}?tab=results",
         "/workers", "/failed"]
JSON = ["/api/tasks", "/api/jobs", "/api/jobs/{id}", "/metrics"]
ACTIONS = ["/jobs/{id}/retry", "/jobs/{id}/cancel", "/tasks/test-count/run",
           "/tasks/test-count/enabled", "/failed/retry", "/operations/confirm", "/operations",
           "/logout"]


@pytest.fixture
def app(make_app):
    return make_app(dashboard_token=TOKEN)


def no_cors(resp) -> None:
    assert not [h for h in resp.headers.keys() if h.lower().startswith("access-control-")]


@SQLITE
def test_without_the_token_every_page_and_json_route_answers_401(app):
    job = add_row(app, status="failed", error="boom")
    client = web_client(app)
    for path in PAGES:
        resp = client.get(path.format(id=job))
        assert resp.status_code == 401, path
        html = resp.get_data(as_text=True)
        assert 'name="token"' in html and 'action="/login"' in html, path  # the login form
        no_cors(resp)
    for path in JSON:
        resp = client.get(path.format(id=job))
        assert resp.status_code == 401 and resp.is_json, path
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
        no_cors(resp)
    for path in ACTIONS[:-1]:
        assert client.post(path.format(id=job)).status_code == 401, path
    # ?token= is not a way in (it would leak into logs), nor a wrong Bearer token
    assert client.get(f"/api/tasks?token={TOKEN}").status_code == 401
    assert client.get("/api/tasks", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert row(app, job)["status"] == "failed"
    # with the token: the same routes answer
    for path in PAGES + JSON:
        resp = client.get(path.format(id=job), headers=BEARER)
        assert resp.status_code == 200, (path, resp.get_data(as_text=True)[:500])
        no_cors(resp)


@SQLITE
def test_health_answers_only_its_status_without_the_token(app):
    client = web_client(app)
    anonymous = client.get("/health")
    assert set(anonymous.get_json()) == {"status"}
    assert anonymous.status_code == (503 if anonymous.get_json()["status"] == "fail" else 200)
    full = client.get("/health", headers=BEARER).get_json()
    assert full["status"] == anonymous.get_json()["status"]
    assert {c["name"] for c in full["checks"]} == {"database", "broker", "queues", "workers",
                                                   "scheduler", "overdue", "flow", "resources"}


@SQLITE
def test_login_form_sets_an_httponly_samesite_session_cookie(app):
    client = web_client(app)
    page = client.get("/login?next=/queue").get_data(as_text=True)
    csrf = csrf_of(page)
    wrong = client.post("/login", data={"token": "guess", "csrf_token": csrf, "next": "/queue"})
    assert wrong.status_code == 401 and "Wrong token." in wrong.get_data(as_text=True)
    assert client.post("/login", data={"token": TOKEN, "next": "/"}).status_code == 403  # no CSRF
    assert client.get("/queue").status_code == 401
    ok = client.post("/login", data={"token": TOKEN, "csrf_token": csrf, "next": "/queue"})
    assert ok.status_code == 303 and ok.headers["Location"] == "/queue"
    cookie = ok.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and TOKEN not in cookie
    assert client.get("/queue").status_code == 200
    # an open redirect is not possible through `next`
    client2 = web_client(app)
    csrf2 = csrf_of(client2.get("/login").get_data(as_text=True))
    away = client2.post("/login", data={"token": TOKEN, "csrf_token": csrf2,
                                        "next": "//evil.example/x"})
    assert away.headers["Location"] == "/"
    # log out ends the session
    csrf3 = csrf_of(client.get("/").get_data(as_text=True))
    assert client.post("/logout", data={"csrf_token": csrf3}).status_code == 303
    assert client.get("/").status_code == 401


@SQLITE
def test_post_without_csrf_token_gets_403_and_changes_nothing(app):
    failed = add_row(app, status="failed", error="boom", attempts=3)
    pending = add_row(app)
    task_infos(app)  # the runtime rows exist
    client = web_client(app)
    csrf = login(client)
    before = count(app)
    for path, data in (("/jobs/{id}/retry", {}), ("/failed/retry", {"job": str(failed)}),
                       ("/tasks/test-count/run", {"request_token": "tok-12345678"}),
                       ("/tasks/test-count/enabled", {"enabled": "0"}),
                       ("/operations", {"action": "retry", "scope": "all", "source": "failed"}),
                       ("/operations/confirm", {"action": "delete", "scope": "ticked",
                                                "source": "queue", "id": str(failed)})):
        resp = client.post(path.format(id=failed), data=data)
        assert resp.status_code == 403, path
        assert "CSRF" in resp.get_data(as_text=True)
        bad = client.post(path.format(id=failed), data={**data, "csrf_token": "forged"})
        assert bad.status_code == 403, path
    assert client.post(f"/jobs/{pending}/cancel").status_code == 403
    assert row(app, failed)["status"] == "failed" and row(app, failed)["attempts"] == 3
    assert row(app, pending)["status"] == "pending"
    assert count(app) == before
    with app.engine.connect() as conn:
        enabled = conn.execute(cronjob_runtime.select().where(
            cronjob_runtime.c.task == "test-count")).mappings().one()["enabled"]
    assert enabled
    # the same requests with the session's CSRF token work
    assert client.post(f"/jobs/{failed}/retry", data={"csrf_token": csrf}).status_code == 303
    assert row(app, failed)["status"] == "pending"
    assert client.post(f"/jobs/{pending}/cancel", data={"csrf_token": csrf}).status_code == 303
    assert row(app, pending)["status"] == "cancelled"


@SQLITE
def test_bearer_requests_need_no_csrf_token(app):
    failed = add_row(app, status="failed", error="boom")
    client = web_client(app)
    assert client.post(f"/jobs/{failed}/retry", headers=BEARER).status_code == 303
    assert row(app, failed)["status"] == "pending"


@SQLITE
def test_get_on_an_action_url_gets_405(app):
    job = add_row(app, status="failed", error="boom")
    client = web_client(app)
    for path in ACTIONS:
        resp = client.get(path.format(id=job), headers=BEARER)
        assert resp.status_code == 405, path
    assert row(app, job)["status"] == "failed"


@SQLITE
def test_security_headers(app):
    resp = web_client(app).get("/", headers=BEARER)
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert resp.headers["Cache-Control"] == "no-store"


def test_listening_beyond_loopback_needs_a_token(tmp_path):
    from cronjobs.app import App
    from cronjobs.config import Settings
    from cronjobs.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'x.db'}"
    app = App(Settings(database_url=url))
    configured = App(Settings(database_url=url, dashboard_token=TOKEN))
    try:
        assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
        assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1")
        with pytest.raises(ConfigError, match="0.0.0.0 without a token"):
            ensure_token(app, "0.0.0.0")
        with pytest.raises(ConfigError, match="run `cronjobs migrate`"):
            ensure_token(app, "127.0.0.1")  # the generated token is kept in the database
        upgrade(app.engine)
        token, generated = ensure_token(app, "127.0.0.1")
        assert generated and len(token) >= 20
        assert app.settings.dashboard.token is None  # passed on explicitly, settings untouched
        assert ensure_token(app, "localhost") == (token, True)  # the one kept in the database
        assert ensure_token(configured, "0.0.0.0") == (TOKEN, False)
        short = App(Settings(database_url=url, dashboard_token="short"))
        with pytest.raises(ConfigError, match="on 0.0.0.0 with a token of 5 characters: "
                                              "use at least 16"):
            ensure_token(short, "0.0.0.0")
        assert ensure_token(short, "127.0.0.1") == ("short", False)  # loopback: as before
        short.close()
    finally:
        app.close()
        configured.close()
