"""Scoped API tokens (issue 40 §1): stored hashed, made and revoked by `cronjobs tokens`;
every write route refuses a token whose scope is too small (403, naming both scopes), a
missing, wrong or revoked token is 401; Bearer POSTs need no CSRF token, cookie POSTs
do; actions record the token's name; last_used_at is written at most once a minute."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from cronjobs.cli import main
from cronjobs.clock import FrozenClock
from cronjobs.store import tokens
from cronjobs.store.models import cronjob_token
from cronjobs.web import auth, create_app
from cronjobs.web.scopes import SCOPES, needed, scope_allows
from dashboard_helpers import BEARER, TOKEN, add_row, csrf_of, login, row

MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
POSTGRES = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
SAFE = {"GET", "HEAD", "OPTIONS"}
T0 = datetime(2026, 6, 1, 12, 0, 0)


def make_tokens(app) -> dict[str, str]:
    """One stored token per scope, named after it: `{scope: token}`."""
    with app.engine.begin() as conn:
        return {s: tokens.create(conn, f"t-{s}", s, app.clock.now()) for s in SCOPES}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def sample_url(rule) -> str:
    """A URL of `rule` with made-up values: an `any(...)` takes its first choice, a row id
    999999999, any other argument `zz`."""
    def value(match: re.Match) -> str:
        converter = match[1] or ""
        if converter.startswith("any("):
            return converter[4:].split(",")[0].strip()
        return "999999999" if converter in ("id", "int") else "zz"
    return re.sub(r"<(?:([^:<>]+):)?[^<>]+>", value, rule.rule)


@MARIADB
def test_every_write_route_needs_its_scope_and_says_which(make_app):
    app = make_app(dashboard_token=TOKEN)
    web = create_app(app)
    client = web.test_client()
    made = make_tokens(app)
    writes = [(rule, method) for rule in web.url_map.iter_rules()
              for method in sorted((rule.methods or set()) - SAFE)
              if rule.endpoint not in auth.PUBLIC]
    assert len(writes) >= 30  # the dashboard's forms and the JSON routes alike
    refused = 0
    for rule, method in writes:
        need = needed(web.view_functions[rule.endpoint], method)
        url = sample_url(rule)
        for scope, token in made.items():
            resp = client.open(url, method=method, headers=bearer(token))
            if scope_allows(scope, need):
                assert resp.status_code not in (401, 403), (url, method, scope)
                continue
            refused += 1
            assert resp.status_code == 403 and resp.is_json, (url, method, scope)
            assert resp.get_json() == {"error": f"forbidden: {method} {url} needs scope {need}; "
                                                f"token 't-{scope}' has {scope}"}
    assert refused > 60
    # the marks of the issue: operator actions operate, schedules admin, pings dispatch
    marks = {rule.rule: needed(web.view_functions[rule.endpoint], "POST")
             for rule in web.url_map.iter_rules() if "POST" in (rule.methods or ())}
    assert {marks[p] for p in ("/jobs/<id:job_id>/retry", "/jobs/<id:job_id>/cancel",
                               "/jobs/<id:job_id>/stop", "/tasks/<task>/run", "/flow/pause",
                               "/flow/resume", "/flow/unblock", "/failed/retry", "/operations",
                               "/api/jobs/<id:job_id>/retry", "/api/pauses",
                               "/api/blocks/unblock")} == {"operate"}
    assert {marks["/schedules/add"], marks["/api/schedules"]} == {"admin"}
    assert marks["/api/ping/<task>"] == "dispatch"
    # reads: every GET /api/ route answers a read token
    for rule in web.url_map.iter_rules():
        if rule.rule.startswith("/api/") and "GET" in (rule.methods or ()):
            assert client.get(sample_url(rule), headers=bearer(made["read"])
                              ).status_code not in (401, 403), rule.rule


@POSTGRES
def test_missing_wrong_and_revoked_tokens_are_401(make_app):
    app = make_app(dashboard_token=TOKEN)
    client = create_app(app).test_client()
    made = make_tokens(app)
    assert client.get("/api/jobs", headers=bearer(made["read"])).status_code == 200
    for scheme in ("bearer", "BEARER", "BeArEr"):  # RFC 7235: the scheme in any case
        assert client.get("/api/jobs", headers={"Authorization": f"{scheme} {made['read']}"}
                          ).status_code == 200, scheme
    resp = client.get("/api/jobs")
    assert "send Authorization: Bearer <token>" in resp.get_json()["error"]
    resp = client.get("/api/jobs", headers=bearer("nope"))
    assert resp.get_json()["error"] == ("unauthorized: the token is not valid (unknown or "
                                        "revoked)")
    for headers in ({}, bearer("nope"), bearer(made["read"] + "x"), bearer("x" * 5000),
                    {"Authorization": f"Basic {made['read']}"}):
        resp = client.get("/api/jobs", headers=headers)
        assert resp.status_code == 401 and resp.headers["WWW-Authenticate"].startswith("Bearer")
    with app.engine.connect() as conn:
        stored = conn.execute(sa.select(cronjob_token.c.hash)).scalars().all()
    assert made["read"] not in str(stored) and tokens.token_hash(made["read"]) in stored
    with app.engine.begin() as conn:
        tokens.revoke(conn, "t-read", app.clock.now())
    assert client.get("/api/jobs", headers=bearer(made["read"])).status_code == 401
    assert client.get("/api/jobs", headers=bearer(made["admin"])).status_code == 200
    # the dashboard's own token stays an admin token named "dashboard"
    job = add_row(app, status="failed", error="boom")
    assert client.post(f"/api/jobs/{job}/retry", headers=BEARER).status_code == 200
    assert "retried by dashboard:" in row(app, job)["process_logs"]


@POSTGRES
def test_bearer_posts_need_no_csrf_but_cookie_posts_do_and_who_is_recorded(make_app):
    clock = FrozenClock(T0)
    app = make_app(dashboard_token=TOKEN, clock=clock)
    web = create_app(app)
    made = make_tokens(app)
    first, second = (add_row(app, status="failed", error="boom") for _ in range(2))
    client = web.test_client()
    resp = client.post(f"/api/jobs/{first}/retry", headers=bearer(made["operate"]))
    assert resp.status_code == 200 and resp.get_json() == {"id": first, "status": "pending"}
    assert "retried by token:t-operate:" in row(app, first)["process_logs"]
    resp = client.post("/api/pauses", json={"queue": "emails", "for": "30m"},
                       headers=bearer(made["operate"]))
    assert resp.status_code == 201 and resp.get_json()["created_by"] == "token:t-operate"
    csrf = login(client)  # a cookie session: admin, but CSRF still needed
    resp = client.post(f"/api/jobs/{second}/retry")
    assert resp.status_code == 403 and "CSRF check failed" in resp.get_json()["error"]
    resp = client.post("/jobs/1/retry", headers={"Accept": "application/json"})
    assert resp.status_code == 403 and resp.is_json
    # a Bearer header decides: a wrong one is 401, never the cookie session's admin
    resp = client.post(f"/api/jobs/{second}/retry", headers={**bearer("nope"),
                                                            "X-CSRFToken": csrf})
    assert resp.status_code == 401, resp.get_data(as_text=True)
    assert row(app, second)["status"] == "failed"
    assert client.post(f"/jobs/{second}/retry", data={"csrf_token": "bad"}).status_code == 403
    assert client.post(f"/api/jobs/{second}/retry",
                       headers={"X-CSRFToken": csrf}).status_code == 200
    assert "retried by dashboard:" in row(app, second)["process_logs"]
    # last_used_at: written on first use, then at most once a minute
    def last_used():
        with app.engine.connect() as conn:
            return conn.execute(sa.select(cronjob_token.c.last_used_at).where(
                cronjob_token.c.name == "t-operate")).scalar_one()
    assert last_used() == T0
    clock.advance(59)
    fresh = create_app(app).test_client()  # another dashboard process: the stored time counts
    assert fresh.get("/api/jobs", headers=bearer(made["operate"])).status_code == 200
    assert last_used() == T0
    clock.advance(2)
    assert fresh.get("/api/jobs", headers=bearer(made["operate"])).status_code == 200
    assert last_used() == clock.now()
    page = client.get("/").get_data(as_text=True)
    assert csrf_of(page)


@MARIADB
def test_the_tokens_commands_create_list_and_revoke(make_app):
    app = make_app(dashboard_token=TOKEN)
    runner = CliRunner()
    made = runner.invoke(main, ["tokens", "create", "ci-bot", "--scope", "dispatch"])
    assert made.exit_code == 0, made.output
    token = made.output.splitlines()[-1]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)
    client = create_app(app).test_client()
    assert client.post("/api/ping/zz", headers=bearer(token)).status_code == 404  # dispatch: in
    assert client.post("/api/jobs/1/retry", headers=bearer(token)).status_code == 403
    listed = runner.invoke(main, ["tokens", "list"])
    assert listed.exit_code == 0 and "ci-bot" in listed.output and "dispatch" in listed.output
    assert token not in listed.output and tokens.token_hash(token) not in listed.output
    assert "ci-bot" in runner.invoke(main, ["tokens", "list", "--json"]).output
    for argv, words in [
        (["create", "ci-bot", "--scope", "read"], "a token named 'ci-bot' exists already"),
        (["create", "x y", "--scope", "read"], "token name must be 1 to 64"),
        (["create", "dashboard", "--scope", "read"], "reserved"),
        (["create", "other", "--scope", "root"], "scope must be one of read, dispatch, operate, "
                                                 "admin, got 'root'"),
        (["revoke", "nobody"], "no token named 'nobody'"),
    ]:
        result = runner.invoke(main, ["tokens", *argv])
        assert result.exit_code == 2 and words in result.output, (argv, result.output)
        assert len(result.output.strip().splitlines()) == 1
    assert runner.invoke(main, ["tokens", "revoke", "ci-bot"]).exit_code == 0
    assert client.post("/api/ping/zz", headers=bearer(token)).status_code == 401
    again = runner.invoke(main, ["tokens", "revoke", "ci-bot"])
    assert again.exit_code == 2 and "revoked already" in again.output
    # a revoked name may be reused: the row is replaced, with a new hash (the old stays 401)
    remade = runner.invoke(main, ["tokens", "create", "ci-bot", "--scope", "operate"])
    assert remade.exit_code == 0, remade.output
    new_token = remade.output.splitlines()[-1]
    assert new_token != token and client.post("/api/ping/zz", headers=bearer(token)
                                              ).status_code == 401
    assert client.post("/api/jobs/1/retry", headers=bearer(new_token)).status_code == 404
    for argv, words in [
        (["revoke", "dashboard"], "the dashboard token is CRONJOBS_DASHBOARD_TOKEN and "
                                  "cannot be revoked here"),
        (["create", "a\tb", "--scope", "read"], "each an ASCII letter (A-Z, a-z), a digit "
                                                "(0-9) or one of . _ @ : -"),
        (["create", "ş", "--scope", "read"], "got 'ş'"),
    ]:
        result = runner.invoke(main, ["tokens", *argv])
        assert result.exit_code == 2 and words in result.output, (argv, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert "got 'a\\tb'" in runner.invoke(main, ["tokens", "create", "a\tb", "--scope",
                                                   "read"]).output  # escaped, shown
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cronjob_token)).scalar() == 1


@MARIADB
def test_built_in_types_need_admin_over_http_and_a_batch_its_highest_row(make_app):
    """Security QA (issue 40 fix-sec1): a dispatch token cannot start cleanup, backup,
    uptime or TLS rows (their DISPATCH_SCOPE is admin); a batch needs its highest row."""
    import cronjobs
    import registry
    from cronjobs import CronJobHandler
    from cronjobs.errors import HandlerError
    from cronjobs.handler import DISPATCH_SCOPES
    from dashboard_helpers import count

    app = make_app(dashboard_token=TOKEN)
    client = create_app(app).test_client()
    made = make_tokens(app)
    builtins = {t: c for t, c in app.handlers.registered_handlers().items()
                if c.__module__.startswith("handlers.")}
    assert DISPATCH_SCOPES == SCOPES  # the registry checks against the handler's copy
    assert len(builtins) >= 8 and {c.DISPATCH_SCOPE for c in builtins.values()} == {"admin"}
    cleanup = {"type": "cronjobs.cleanup.execute", "payload": {"retention": {"completed": 0}}}
    for scope in ("dispatch", "operate"):
        resp = client.post("/api/jobs", json=cleanup, headers=bearer(made[scope]))
        assert resp.status_code == 403 and resp.get_json() == {"error": (
            "forbidden: POST /api/jobs of type 'cronjobs.cleanup.execute' needs scope admin "
            f"(its DISPATCH_SCOPE); token 't-{scope}' has {scope}")}
    batch = {"jobs": [{"type": "test.record.execute"}, {"type": "http.uptime.execute"}]}
    resp = client.post("/api/jobs:batch", json=batch, headers=bearer(made["dispatch"]))
    assert resp.status_code == 403 and resp.get_json()["index"] == 1
    assert resp.get_json()["error"].startswith("jobs[1]: forbidden: POST /api/jobs:batch of "
                                               "type 'http.uptime.execute' needs scope admin")
    assert count(app) == 0  # nothing written
    assert client.post("/api/jobs", json={"type": "test.record.execute"},
                       headers=bearer(made["dispatch"])).status_code == 201
    assert client.post("/api/jobs:batch", json=batch, headers=bearer(made["admin"])
                       ).status_code == 201
    assert client.post("/api/jobs", json=cleanup, headers=BEARER).status_code == 201
    assert count(app) == 4
    # Run now: operate runs a built-in task with its own payload, not with one it gives
    run = "/api/tasks/cronjobs-cleanup/run"
    resp = client.post(run, json={"payload": cleanup["payload"]}, headers=bearer(made["operate"]))
    assert resp.status_code == 403 and resp.get_json()["error"].endswith(
        "token 't-operate' has operate; without a payload, operate may run it")
    form = client.post("/tasks/cronjobs-cleanup/run", data={"payload": '{"retention": {}}'},
                       headers=bearer(made["operate"]))
    assert form.status_code == 403 and count(app) == 4
    assert client.post(run, json={}, headers=bearer(made["operate"])).status_code == 201

    class Bad(CronJobHandler):
        TYPE, DISPATCH_SCOPE = "bad.scope.execute", "root"

        def handle(self, payload, job):
            return True
    with pytest.raises(HandlerError, match="Bad: DISPATCH_SCOPE must be one of 'read', "
                                           "'dispatch', 'operate', 'admin', got 'root'"):
        registry.check_class(Bad.TYPE, Bad)

    def fn(payload, job):
        return True
    decorated = cronjobs.handler("fn.scope.execute", dispatch_scope="operate")(fn)
    assert decorated.handler_class.DISPATCH_SCOPE == "operate"
    listed = CliRunner().invoke(main, ["list-handlers", "--json"])
    scopes = {r["type"]: r["dispatch_scope"] for r in json.loads(listed.output)}
    assert scopes["db.backup.execute"] == "admin" and scopes["test.record.execute"] == "dispatch"
