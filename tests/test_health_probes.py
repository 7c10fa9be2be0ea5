"""Liveness is not readiness: /health/live answers while the database is down, /health/ready
follows the database only (not workers), every page answers 503 for a database that cannot
answer, and a check that itself breaks is `check_error` (exit 3), never an outage."""

from __future__ import annotations

import json
import socket
import time
from datetime import timedelta

import pytest

from conftest import cli_env, run_cli
from cronjobs import store
from cronjobs.app import App
from cronjobs.config import Settings
from cronjobs.health import CHECK_ERROR, run_health
from cronjobs.health.checks import database
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_worker
from cronjobs.testing import drain
from dashboard_helpers import BEARER, TOKEN, add_row, web_client

SERVERS = pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
PAGES = ["/", "/queue", "/workers", "/failed"]
JSON_ROUTES = ["/api/tasks", "/api/jobs"]


def closed_port() -> int:
    """A local TCP port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def down_url(backend: str, tmp_path) -> str:
    """A database URL of `backend` that cannot be reached."""
    return {"sqlite": f"sqlite:///{tmp_path}/no-such-folder/cronjobs.db",
            "mariadb": f"mysql+pymysql://root@127.0.0.1:{closed_port()}/test",
            "postgresql": f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/test",
            }[backend]


def make_healthy(app: App) -> None:
    """Run the schedule once and give every queue a live worker (heartbeat now)."""
    tick(app.clock.now(), app=app)
    drain(app)
    with app.engine.begin() as conn:
        seen = store.database_now(conn)
        conn.execute(cronjob_worker.insert().values(
            id="w1", host="h", pid=1, queues=",".join(app.queues()), status="running",
            started_at=seen, last_seen_at=seen, jobs_done=0))


def raising(exc: BaseException):
    def check(app, check):
        raise exc
    return check


def missing_table(app, check) -> None:
    """A check whose statement the database refuses (raises a real driver error)."""
    with app.engine.connect() as conn:
        conn.exec_driver_sql("SELECT id FROM no_such_table")


def test_live_answers_and_ready_refuses_while_the_database_is_down(backend, tmp_path):
    app = App(Settings(database_url=down_url(backend, tmp_path), dashboard_token=TOKEN,
                       health_timeout_seconds=2))
    try:
        client = web_client(app)
        started = time.monotonic()
        live = client.get("/health/live")
        assert (live.status_code, live.get_json()) == (200, {"status": "ok"})
        assert time.monotonic() - started < 0.5
        started = time.monotonic()
        ready = client.get("/health/ready")
        assert (ready.status_code, ready.get_json()) == (503, {"status": "fail"})
        assert time.monotonic() - started < 3
        full = client.get("/health/ready", headers=BEARER).get_json()
        assert full["checks"][0]["name"] == "database" and full["checks"][0]["status"] == "fail"
        assert client.get("/health").status_code == 503
        # every page and JSON route: 503 (the database cannot answer), never 400 or 500
        for path in PAGES + JSON_ROUTES:
            resp = client.get(path, headers=BEARER)
            assert resp.status_code == 503, (path, resp.status_code,
                                             resp.get_data(as_text=True)[:300])
            assert resp.headers["Retry-After"] == "5"
            if path.startswith("/api/"):
                assert "did not answer in time" in resp.get_json()["error"], path
            else:
                assert "did not answer in time" in resp.get_data(as_text=True), path
        action = client.post("/tasks/cronjobs-cleanup/run", headers=BEARER)  # an action too
        assert action.status_code == 503, action.get_data(as_text=True)[:300]
        turkish = client.get("/workers?lang=tr", headers=BEARER).get_data(as_text=True)
        assert "Veritabanı zamanında yanıt vermedi" in turkish
    finally:
        app.close()


def test_ready_needs_the_database_only_not_a_worker(make_app):
    app = make_app(dashboard_token=TOKEN)
    add_row(app, created_at=app.clock.now() - timedelta(minutes=5))  # due, and no worker
    client = web_client(app)
    full = client.get("/health")
    assert (full.status_code, full.get_json()) == (503, {"status": "fail"})  # the full report
    ready = client.get("/health/ready")
    assert (ready.status_code, ready.get_json()) == (200, {"status": "ok"})
    detail = client.get("/health/ready", headers=BEARER).get_json()
    assert [c["name"] for c in detail["checks"]] == ["database"]
    assert detail["checks"][0]["data"]["response_ms"] >= 0
    assert client.get("/health/live").status_code == 200


def test_a_check_that_breaks_is_check_error_naming_it_not_an_outage(make_app):
    app = make_app()
    broken = [("database", database),
              ("imports", raising(ModuleNotFoundError("No module named 'psutil'"))),
              ("files", raising(PermissionError(13, "Permission denied", "/var/log/cronjobs")))]
    report = run_health(app, checks=broken)
    by_name = {c.name: c for c in report.checks}
    assert by_name["database"].status == "ok"
    assert by_name["imports"].status == CHECK_ERROR == by_name["files"].status
    assert by_name["imports"].message == "ModuleNotFoundError: No module named 'psutil'"
    assert [(p.key, p.status) for p in report.problems] == [
        ("check_error:imports", "warn"), ("check_error:files", "warn")]
    assert "the files check is broken (PermissionError" in report.problems[1].message
    assert report.status == "warn" and report.exit_code == 3  # unknown, not an outage
    body = report.as_dict()
    assert body["status"] == "warn" and body["check_errors"] == ["imports", "files"]
    assert [c["status"] for c in body["checks"]] == ["ok", CHECK_ERROR, CHECK_ERROR]

    # a network or database error raised by a check is what it looks for: an outage
    port = closed_port()
    outage = run_health(app, checks=broken + [
        ("remote", lambda a, c: socket.create_connection(("127.0.0.1", port), timeout=1)),
        ("store", missing_table)])
    statuses = {c.name: c.status for c in outage.checks}
    assert statuses["remote"] == "fail" and statuses["store"] == "fail"
    assert statuses["imports"] == CHECK_ERROR
    assert outage.status == "fail" and outage.exit_code == 2  # a real outage wins


@SERVERS
def test_a_broken_check_on_the_web_and_the_command_line(make_app, db_url):
    # the resources check measures the log folder on a server database: one that does
    # not exist breaks the check (FileNotFoundError), not the system
    limits = {"health_memory_warn_percent": 100, "health_memory_fail_percent": 100,
              "health_disk_warn_percent": 100, "health_disk_fail_percent": 100}
    app = make_app(dashboard_token=TOKEN, log_dir="/nonexistent/cronjobs-logs", **limits)
    make_healthy(app)
    client = web_client(app)
    anonymous = client.get("/health")
    assert (anonymous.status_code, anonymous.get_json()) == (200, {"status": "warn"})
    full = client.get("/health", headers=BEARER).get_json()
    assert full["check_errors"] == ["resources"], full
    resources = next(c for c in full["checks"] if c["name"] == "resources")
    assert resources["status"] == CHECK_ERROR and "FileNotFoundError" in resources["message"]
    assert client.get("/health/ready").status_code == 200

    env = cli_env(db_url, CRONJOBS_LOG_DIR="/nonexistent/cronjobs-logs",
                  **{f"CRONJOBS_{k.upper()}": "100" for k in limits})
    out = run_cli(["health"], env)
    assert out.returncode == 3, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(line.split()[:2] == ["resources", CHECK_ERROR] for line in lines), out.stdout
    assert any(line.startswith("CHECK_ERROR: the resources check is broken (FileNotFoundError")
               for line in lines), out.stdout
    assert lines[-1] == "health: warn (check_error: resources could not run)"
    out = run_cli(["health", "--json"], env)
    assert out.returncode == 3 and json.loads(out.stdout)["check_errors"] == ["resources"]
