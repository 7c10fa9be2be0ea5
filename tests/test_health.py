"""Health: every check, exit codes, the deadline with a stopped or hung
Redis and a hung database, overdue tasks, stuck workers, Redis maxmemory-policy."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest

from conftest import cli_env
from cronjobs.app import App
from cronjobs.config import Settings
from cronjobs.health import run_health
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_worker
from cronjobs.testing import FrozenClock, drain
from dashboard_helpers import BEARER, TOKEN, add_row, recent_t0, web_client

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
REDIS_PORT = 6391  # our own server: the shared Redis is never stopped


def db_ago(app: App, seconds: float = 0):
    """The database clock's now minus `seconds`: heartbeat ages follow that clock."""
    from cronjobs import store

    with app.engine.connect() as conn:
        return store.database_now(conn) - timedelta(seconds=seconds)


def beat(app: App, worker_id: str, queues: str, age_seconds: float = 0) -> None:
    seen = db_ago(app, age_seconds)
    with app.engine.begin() as conn:
        conn.execute(cronjob_worker.insert().values(
            id=worker_id, host="h", pid=1, queues=queues, status="running", started_at=seen,
            last_seen_at=seen, jobs_done=0))


def check(report, name: str):
    return next(c for c in report.checks if c.name == name)


@SQLITE
def test_a_healthy_system_is_ok_and_each_problem_names_itself(make_app):
    T0 = recent_t0()
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    tick(T0, app=app)
    drain(app)
    beat(app, "w1", "default,maintenance")
    report = run_health(app)
    assert report.status == "ok", [p.__dict__ for p in report.problems]
    assert report.exit_code == 0
    assert check(report, "database").data["response_ms"] >= 0
    assert check(report, "scheduler").data["age_seconds"] == 0
    # a queue without a live worker: warn; with due rows waiting: fail
    beat_gone = db_ago(app, 5 * 60)
    with app.engine.begin() as conn:
        conn.execute(cronjob_worker.update().values(last_seen_at=beat_gone))
    report = run_health(app)
    assert report.status == "warn" and report.exit_code == 1
    assert {p.key for p in report.problems} == {"workers:default", "workers:maintenance"}
    add_row(app, queue="orphaned", created_at=app.clock.now() - timedelta(minutes=1))
    report = run_health(app)
    orphan = next(p for p in report.problems if p.key == "workers:orphaned")
    assert orphan.status == "fail" and "1 due row(s) and no live worker" in orphan.message
    assert check(report, "queues").data["due"]["orphaned"]["oldest_due_age_seconds"] == 60


@SQLITE
def test_a_live_worker_that_stopped_taking_rows_is_a_problem(make_app):
    T0 = recent_t0()
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    tick(T0, app=app)
    drain(app)
    beat(app, "w1", "default,maintenance")
    add_row(app, created_at=app.clock.now() - timedelta(seconds=200))
    assert run_health(app).status == "ok"  # 200 s < health_stuck_seconds (300)
    add_row(app, created_at=app.clock.now() - timedelta(seconds=400))
    stuck = next(p for p in run_health(app).problems if p.key == "stuck:default")
    assert stuck.status == "fail" and "while 1 worker(s) are live" in stuck.message


@SQLITE
def test_overdue_tasks_warn_at_twice_and_fail_at_five_times_their_frequency(make_app):
    T0 = recent_t0()
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    tick(T0, app=app)
    drain(app)
    beat(app, "w1", "default,maintenance")

    def overdue_at(minutes: float) -> dict:
        clock.set(T0 + timedelta(minutes=minutes))
        beat_row = {"last_seen_at": db_ago(app)}
        with app.engine.begin() as conn:
            conn.execute(cronjob_worker.update().values(**beat_row))
        return {p.key: p.status for p in run_health(app).problems if p.key.startswith("overdue:")}

    assert overdue_at(1.5) == {}
    late = overdue_at(3)  # the scheduler stopped: minute tasks are 3 periods behind
    assert late["overdue:test-count"] == "warn" and late["overdue:cronjobs-recoverstale"] == "warn"
    assert "overdue:http-uptime" not in late  # idle (no uptime URL): never started, not late
    assert "overdue:cronjobs-cleanup" not in late  # daily
    late = overdue_at(6)
    assert late["overdue:test-count"] == "fail"
    report = run_health(app)
    assert check(report, "scheduler").status == "fail" and report.exit_code == 2


@pytest.fixture
def own_redis(tmp_path):
    proc = subprocess.Popen(["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "ping"], capture_output=True,
                          text=True).stdout.strip() == "PONG":
            break
        time.sleep(0.1)
    yield proc
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(20)


@SQLITE
def test_redis_stopped_or_hung_is_a_broker_fail_within_5_seconds(db_url, make_app, own_redis):
    url = f"redis://127.0.0.1:{REDIS_PORT}/0"
    app = make_app(broker_url=url, dashboard_token=TOKEN)
    env = cli_env(db_url, broker_url=url)

    def cli_health() -> tuple[int, dict, float]:
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "cronjobs", "health", "--json"], env=env,
                             capture_output=True, text=True, timeout=60)
        return out.returncode, json.loads(out.stdout), time.monotonic() - started

    code, report, _ = cli_health()
    broker = next(c for c in report["checks"] if c["name"] == "broker")
    assert broker["status"] == "ok" and broker["data"]["maxmemory_policy"] == "noeviction"
    subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "config", "set", "maxmemory-policy",
                    "allkeys-lru"], check=True, capture_output=True)
    _, report, _ = cli_health()
    broker = next(c for c in report["checks"] if c["name"] == "broker")
    assert broker["status"] == "warn" and "allkeys-lru" in broker["problems"][0]["message"]

    os.kill(own_redis.pid, signal.SIGSTOP)  # hung: the port accepts, nothing answers
    client = web_client(app)
    try:
        code, report, elapsed = cli_health()
        print(f"\ncronjobs health --json with Redis hung: exit {code} in {elapsed:.1f} s")
        assert code == 2 and report["status"] == "fail" and elapsed < 5, (code, elapsed)
        assert next(c for c in report["checks"] if c["name"] == "broker")["status"] == "fail"
        started = time.monotonic()
        resp = client.get("/health")
        assert resp.status_code == 503 and resp.get_json() == {"status": "fail"}
        assert time.monotonic() - started < 5
    finally:
        os.kill(own_redis.pid, signal.SIGCONT)
    own_redis.terminate()  # stopped
    own_redis.wait(20)
    code, report, elapsed = cli_health()
    print(f"cronjobs health --json with Redis stopped: exit {code} in {elapsed:.1f} s")
    broker = next(c for c in report["checks"] if c["name"] == "broker")
    assert (code, report["status"], broker["status"]) == (2, "fail", "fail") and elapsed < 5
    assert "does not answer" in broker["problems"][0]["message"]
    started = time.monotonic()
    resp = client.get("/health", headers=BEARER)
    assert resp.status_code == 503 and time.monotonic() - started < 5
    assert next(c for c in resp.get_json()["checks"] if c["name"] == "broker")["status"] == "fail"


def test_a_hung_database_cannot_hang_health(tmp_path):
    """A server that accepts connections and never answers (a hung MariaDB)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(50)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    port = listener.getsockname()[1]
    settings = Settings(database_url=f"mysql+pymysql://root@127.0.0.1:{port}/test",
                        health_timeout_seconds=2, dashboard_token=TOKEN)
    app = App(settings)
    try:
        started = time.monotonic()
        report = run_health(app)
        elapsed = time.monotonic() - started
        assert elapsed < 3, elapsed
        assert report.status == "fail" and check(report, "database").status == "fail"
        assert "no answer within 2 s" in check(report, "database").message
        assert check(report, "broker").status == "ok"  # checks that do not need it still answer
        started = time.monotonic()
        resp = web_client(app).get("/health")
        assert resp.status_code == 503 and time.monotonic() - started < 3
    finally:
        stop.set()
        for conn in held:
            conn.close()
        listener.close()
