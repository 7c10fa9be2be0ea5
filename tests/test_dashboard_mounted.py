"""The dashboard mounted at /jobs in a Flask app (Werkzeug's DispatcherMiddleware) and in
a FastAPI app (a2wsgi), behind the host's own login through `create_app(...,
authorize=)` — the examples of docs/mounting.md. The gate holds in both mounts: nothing
without a sign-in or the token, CSRF on every POST of a cookie session (the host's
included), escaped row text, every URL under the prefix, no open redirect through
`next`; the token paths (Bearer, the login form) still work."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from flask import g

from cronjobs.web import create_app
from cronjobs.web.auth import host_user
from dashboard_helpers import BEARER, TOKEN, add_row, csrf_of, row
from mount_helpers import MOUNTS, URL_ATTR, Client
from test_dashboard_login_next import HOSTILE

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
XSS = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


@pytest.fixture
def app(make_app):
    return make_app(dashboard_token=TOKEN)


@pytest.mark.parametrize("mount", MOUNTS)
def test_without_a_sign_in_nothing_is_shown_or_done(app, mount):
    job = add_row(app, status="failed", error="boom")
    client = Client(mount, app)
    page = client.get("/jobs/queue")  # the examples send a browser to their own login
    assert page.status == 303 and page.headers["location"] == "/login?next=%2Fjobs%2Fqueue"
    api = client.get("/jobs/api/jobs")
    assert api.status == 401 and "unauthorized" in json.loads(api.text)["error"]
    assert client.post(f"/jobs/jobs/{job}/retry").status == 401
    assert client.get("/jobs/api/jobs", Authorization="Bearer nope").status == 401
    # the host's wrong password is no way in either
    assert client.post("/login", {"user": "ada", "password": "guess"}).status == 401
    assert client.get("/jobs/queue").status == 303
    assert row(app, job)["status"] == "failed"


@pytest.mark.parametrize("mount", MOUNTS)
def test_the_hosts_sign_in_lets_in_and_every_url_stays_under_the_prefix(app, mount):
    job = add_row(app, status="failed", error=XSS, title=XSS)
    client = Client(mount, app)
    client.sign_in()
    for path in ("/jobs/", "/jobs/queue", f"/jobs/jobs/{job}", "/jobs/failed", "/jobs/tasks"):
        page = client.get(path)
        assert page.status == 200, (path, page.text[:300])
        urls = URL_ATTR.findall(page.text)
        assert urls and [u for u in urls if not u.startswith("/jobs/")] == [], (path, urls)
        assert XSS not in page.text and "<script>alert(1)" not in page.text
        assert 'action="/jobs/logout"' not in page.text  # the host's login, the host's logout
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get(f"/jobs/jobs/{job}").text
    assert client.get("/jobs/static/style.css").status == 200
    assert client.get("/jobs/api/jobs").status == 200
    ours = [c for c in client.get("/jobs/queue").cookies if c.startswith("cronjobs_session=")]
    assert all("Path=/jobs" in c and "HttpOnly" in c for c in ours)
    assert client.get("/login").status == 200  # the host's own pages are its own


@pytest.mark.parametrize("mount", MOUNTS)
def test_posts_of_the_hosts_session_need_the_csrf_token(app, mount):
    failed, pending = add_row(app, status="failed", error="boom"), add_row(app)
    client = Client(mount, app)
    client.sign_in()
    assert client.post(f"/jobs/jobs/{failed}/retry").status == 403
    assert client.post(f"/jobs/jobs/{pending}/cancel", {"csrf_token": "forged"}).status == 403
    assert row(app, failed)["status"] == "failed" and row(app, pending)["status"] == "pending"
    csrf = csrf_of(client.get(f"/jobs/jobs/{failed}").text)
    done = client.post(f"/jobs/jobs/{failed}/retry", {"csrf_token": csrf})
    assert done.status == 303 and done.headers["location"].endswith(f"/jobs/jobs/{failed}")
    assert row(app, failed)["status"] == "pending"
    assert client.post(f"/jobs/jobs/{pending}/cancel", {"csrf_token": csrf}).status == 303
    assert row(app, pending)["status"] == "cancelled"


@pytest.mark.parametrize("mount", MOUNTS)
def test_the_token_still_works_under_the_mount(app, mount):
    failed = add_row(app, status="failed", error="boom")
    client = Client(mount, app)
    assert client.get("/jobs/api/jobs", **BEARER).status == 200
    spec = json.loads(client.get("/jobs/api/openapi.json", **BEARER).text)
    assert spec["servers"] == [{"url": "/jobs"}] and "/api/jobs" in spec["paths"]
    assert client.post(f"/jobs/jobs/{failed}/retry", **BEARER).status == 303  # no CSRF
    assert row(app, failed)["status"] == "pending"
    for target in HOSTILE[::3]:  # after logging in, `next` stays under the prefix
        form = client.get("/jobs/login")
        assert form.status == 200 and 'action="/jobs/login"' in form.text
        wrong = client.post("/jobs/login", {"token": "guess", "next": target,
                                            "csrf_token": csrf_of(form.text)})
        assert wrong.status == 401 and 'name="next" value="/"' in wrong.text, target
        resp = client.post("/jobs/login", {"token": TOKEN, "next": target,
                                           "csrf_token": csrf_of(form.text)})
        assert (resp.status, resp.headers["location"]) == (303, "/jobs/"), target
    form = client.get("/jobs/login?next=/queue%3Fstatus%3Dfailed")
    resp = client.post("/jobs/login", {"token": TOKEN, "next": "/queue?status=failed",
                                       "csrf_token": csrf_of(form.text)})
    assert resp.headers["location"] == "/jobs/queue?status=failed"
    assert client.get("/jobs/queue").status == 200  # the login's session, at /jobs
    assert 'action="/jobs/logout"' in client.get("/jobs/queue").text


def test_the_authorize_hook_names_who_acts(app):
    web = create_app(app, authorize=lambda request: request.headers.get("X-User"))
    with web.test_request_context("/queue", headers={"X-User": "ada"}):
        assert host_user() == "ada" and g.token_name == "ada" and g.via_authorize
    with web.test_request_context("/queue"):
        assert host_user() is None and "token_name" not in g
    client = web.test_client()
    assert client.get("/queue", headers={"X-User": "ada"}).status_code == 200
    assert client.get("/queue").status_code == 401


def test_a_falsy_answer_of_the_hook_is_nobody(app):
    web = create_app(app, authorize=lambda request: FALSY[request.headers.get("X-No", "none")])
    client = web.test_client()
    for name in FALSY:
        with web.test_request_context("/queue", headers={"X-No": name}):
            assert host_user() is None and not g.get("via_authorize")
        assert client.get("/queue", headers={"X-No": name}).status_code == 401, name
        assert client.get("/api/jobs", headers={"X-No": name}).status_code == 401, name


FALSY = {"none": None, "false": False, "empty": "", "zero": 0, "list": [], "dict": {}}


def test_run_now_and_the_kill_switch_name_the_host_user(app, caplog):
    from cronjobs.schedule.tasks import task_infos

    web = create_app(app, authorize=lambda request: request.headers.get("X-User"))
    client = web.test_client()
    task_infos(app)
    ada = {"X-User": "ada"}
    csrf = csrf_of(client.get("/tasks/test-count", headers=ada).get_data(as_text=True))
    caplog.set_level("INFO", logger="cronjobs")
    resp = client.post("/tasks/test-count/run", headers=ada, data={
        "csrf_token": csrf, "request_token": "tok-host-user-1"})
    assert resp.status_code == 303
    job = row(app, int(resp.headers["Location"].rsplit("/", 1)[1]))
    assert "started by ada (Run now)" in job["process_logs"]
    assert client.post("/tasks/test-count/enabled", headers=ada, data={
        "csrf_token": csrf, "enabled": "0"}).status_code == 303
    assert "task test-count disabled by ada" in caplog.text
    assert f"manual run started as job {job['id']} by ada" in caplog.text
    # the dashboard's token names `dashboard`, as retry and cancel do
    assert client.post("/tasks/test-count/enabled", headers=BEARER,
                       data={"enabled": "1"}).status_code == 303
    assert "task test-count enabled by dashboard" in caplog.text
    api = client.post("/api/tasks/test-count/run", headers=BEARER,
                      json={"request_token": "tok-host-user-2"})
    assert "started by dashboard (Run now)" in row(app, api.get_json()["id"])["process_logs"]


def test_a_long_user_keeps_the_address_of_a_pause(app):
    from cronjobs import store

    user = "a-very-long-single-sign-on-user-name@example.com/" + "x" * 80
    web = create_app(app, authorize=lambda request: user)
    client = web.test_client()
    csrf = csrf_of(client.get("/flow").get_data(as_text=True))
    assert client.post("/flow/pause", data={"csrf_token": csrf, "scope": "queue",
                                            "name": "default"}).status_code == 303
    with app.engine.connect() as conn:
        [made] = [p["created_by"] for p in store.flow.list_pauses(conn, app.clock.now())]
    assert made.endswith("@127.0.0.1") and len(made) == 64 and made.startswith(user[:50])


@pytest.mark.parametrize("mount", MOUNTS)
def test_a_signed_out_browser_goes_to_the_hosts_login_and_back(app, mount):
    client = Client(mount, app)
    page = client.get("/jobs/queue?status=failed")
    assert page.status == 303
    assert page.headers["location"] == "/login?next=%2Fjobs%2Fqueue%3Fstatus%3Dfailed"
    assert client.get("/jobs/api/jobs").status == 401  # JSON: still 401
    assert client.post("/jobs/jobs/1/retry").status == 401  # a POST: still 401
    done = client.post("/login?next=%2Fjobs%2Fqueue%3Fstatus%3Dfailed",
                       {"user": "ada", "password": "lovelace"})
    assert (done.status, done.headers["location"]) == (303, "/jobs/queue?status=failed")
    for hostile in ("//evil.example", "/jobs/..//evil.example", "/logout", "https://x.y/"):
        client = Client(mount, app)
        done = client.post(f"/login?next={quote(hostile, safe='')}",
                           {"user": "ada", "password": "lovelace"})
        assert (done.status, done.headers["location"]) == (303, "/jobs/"), hostile


def test_an_unmigrated_database_is_a_503_that_says_to_migrate(backend, tmp_path):
    from cronjobs.app import App
    from cronjobs.config.settings import Settings

    empty = App(Settings(database_url=f"sqlite:///{tmp_path / 'empty.db'}",
                         broker_url="memory://", dashboard_token=TOKEN))
    client = create_app(empty).test_client()
    page = client.get("/queue", headers=BEARER)
    assert page.status_code == 503
    assert "the database is not migrated: run `cronjobs migrate`" in page.get_data(as_text=True)
    api = client.get("/api/jobs", headers=BEARER)
    assert (api.status_code, api.get_json()) == (
        503, {"error": "the database is not migrated: run `cronjobs migrate`"})
    empty.close()
