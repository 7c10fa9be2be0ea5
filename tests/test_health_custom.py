"""Health checks of your own (`@cronjobs.health_check`, the `cronjobs.health_checks` entry
points): a plugin's check shows in `cronjobs health`; one that hangs is `check_error`
within its timeout while the others answer; a non-critical failure leaves readiness ok, a
critical one fails it; the TTL cache calls the function once within its TTL; alerts once
per problem, with recovery."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from datetime import timedelta

import pytest

import cronjobs
from alert_helpers import Inbox
from conftest import cli_env, run_cli
from cronjobs.health import CHECK_ERROR, alerts, run_health
from cronjobs.health.custom import HealthCheck, app_checks, registered, unregister
from cronjobs.testing import FrozenClock
from dashboard_helpers import BEARER, TOKEN, recent_t0, web_client

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def own_checks():
    """Names decorated in the test; unregistered afterwards (the registry is per process)."""
    names: list[str] = []
    yield names
    for name in names:
        unregister(name)


def passing(check) -> None:
    check.message = "answered"


def failing(check) -> None:
    check.fail("the gateway answered 503")


PLUGIN = '''
    import threading

    import cronjobs

    @cronjobs.health_check("payment-gateway", timeout=2)
    def gateway(check):
        check.message = "gateway answered"
        check.data["ms"] = 12

    @cronjobs.health_check("bot-token", timeout=0.5)
    def bot_token(check):
        threading.Event().wait(30)   # hangs

    def plain(check):
        check.warn("quota at 91 %")
'''


@SQLITE
def test_a_plugins_entry_point_checks_appear_in_cronjobs_health(backend, db_url, tmp_path):
    (tmp_path / "acme_checks.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "acme_checks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-checks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[cronjobs.health_checks]\ngateway = acme_checks:gateway\n"
        "bot = acme_checks:bot_token\nquota = acme_checks:plain\n"
        "gone = acme_missing:check\n")
    env = cli_env(db_url, PYTHONPATH=str(tmp_path))
    started = time.monotonic()
    out = run_cli(["health", "--json", "--timeout", "3"], env)
    took = time.monotonic() - started
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["payment-gateway"]["status"] == "ok", out.stdout
    assert checks["payment-gateway"]["message"] == "gateway answered"
    assert checks["payment-gateway"]["data"]["ms"] == 12
    assert checks["quota"]["status"] == "warn"  # a plain function: named after its entry point
    assert [p["key"] for p in checks["quota"]["problems"]] == ["check:quota"]
    hung = checks["bot-token"]
    assert hung["status"] == CHECK_ERROR and hung["message"] == \
        "TimeoutError: no answer within 0.5 s"
    assert checks["gone"]["status"] == CHECK_ERROR  # cannot be loaded: said, not a crash
    assert "entry point gone (acme_missing:check)" in checks["gone"]["message"]
    assert checks["database"]["status"] == "ok"  # the others still answer
    assert took < 20  # the hung check (30 s) held nobody: the report ended by its deadline

    table = run_cli(["health"], env)
    assert "payment-gateway" in table.stdout and "gateway answered" in table.stdout
    assert "CHECK_ERROR: the bot-token check is broken" in table.stdout


@SQLITE
def test_a_hanging_check_is_check_error_within_its_timeout(make_app, own_checks):
    app = make_app()
    release = threading.Event()
    own_checks += ["hangs", "fine"]
    cronjobs.health_check("hangs", timeout=0.4)(lambda check: release.wait(20))
    cronjobs.health_check("fine")(passing)
    try:
        started = time.monotonic()
        report = run_health(app, timeout_seconds=2)
        took = time.monotonic() - started
        by_name = {c.name: c for c in report.checks}
        assert took < 1.9, took  # the hung check's 0.4 s, not the report's 2 s
        assert by_name["hangs"].status == CHECK_ERROR
        assert by_name["hangs"].message == "TimeoutError: no answer within 0.4 s"
        assert [p.key for p in by_name["hangs"].problems] == ["check_error:hangs"]
        assert (by_name["fine"].status, by_name["fine"].message) == ("ok", "answered")
        assert by_name["database"].status == "ok"
        # the hung call is still going: the next run starts no second call of it
        again = {c.name: c for c in run_health(app, timeout_seconds=2).checks}
        assert again["hangs"].status == CHECK_ERROR and registered()["hangs"].calls == 1
    finally:
        release.set()


@SQLITE
def test_a_check_longer_than_the_reports_deadline_is_check_error_not_fail(make_app):
    app = make_app()
    release = threading.Event()
    slow = HealthCheck("slow", lambda check: release.wait(20), timeout=30)
    try:
        report = run_health(app, timeout_seconds=0.3, checks=[("slow", slow)])
    finally:
        release.set()
    assert report.checks[0].status == CHECK_ERROR and report.status == "warn"
    assert report.checks[0].message == "TimeoutError: no answer within 0.3 s"


@SQLITE
def test_a_non_critical_failure_leaves_readiness_ok_and_a_critical_one_fails_it(
        make_app, own_checks):
    own_checks += ["gateway", "bank"]
    cronjobs.health_check("gateway", critical=False)(failing)
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    ready = client.get("/health/ready")
    assert (ready.status_code, ready.get_json()) == (200, {"status": "ok"})
    checks = {c.name: c for c in run_health(app, timeout_seconds=2).checks}
    gateway = checks["gateway"]
    assert gateway.status == "fail"  # what it found, shown as it is
    assert [(p.key, p.status) for p in gateway.problems] == [("check:gateway", "warn")]
    assert gateway.problems[0].message == "gateway: the gateway answered 503 (not critical)"

    cronjobs.health_check("bank", critical=True)(failing)
    app = make_app(dashboard_token=TOKEN)
    client = web_client(app)
    ready = client.get("/health/ready")
    assert (ready.status_code, ready.get_json()) == (503, {"status": "fail"})
    detail = client.get("/health/ready", headers=BEARER).get_json()
    assert [c["name"] for c in detail["checks"]] == ["database", "bank"]
    full = client.get("/health", headers=BEARER).get_json()
    bank = next(c for c in full["checks"] if c["name"] == "bank")
    assert bank["problems"][0]["status"] == "fail" and bank["data"]["health_check"]["critical"]
    assert full["status"] == "fail"


@SQLITE
def test_the_ttl_cache_calls_the_function_once_within_its_ttl(make_app):
    app = make_app()
    now = [100.0]
    calls = []

    def token(check) -> None:
        calls.append(now[0])
        check.message = f"call {len(calls)}"

    cached = HealthCheck("bot-token", token, timeout=2, ttl="1m", monotonic=lambda: now[0])
    messages = []
    for at in (100.0, 130.0, 159.9, 160.0, 170.0):
        now[0] = at
        check = run_health(app, timeout_seconds=2, checks=[("bot-token", cached)]).checks[0]
        messages.append((check.message, check.data["health_check"]["cached_seconds_ago"]))
    assert calls == [100.0, 160.0] and cached.calls == 2
    assert messages == [("call 1", None), ("call 1", 30.0), ("call 1", 59.9), ("call 2", None),
                        ("call 2", 10.0)]


def test_names_and_durations_are_checked_at_once(own_checks):
    with pytest.raises(ValueError, match="name must be .* got 'Payment Gateway'"):
        cronjobs.health_check("Payment Gateway")
    with pytest.raises(ValueError, match="'database' is a built-in check's"):
        cronjobs.health_check("database")
    with pytest.raises(ValueError, match="health check 'x' timeout must be a duration .* "
                                         "got 'soon'"):
        cronjobs.health_check("x", timeout="soon")
    with pytest.raises(ValueError, match="health check 'x' ttl must be .* got -1"):
        cronjobs.health_check("x", ttl=-1)
    own_checks.append("twice")
    cronjobs.health_check("twice")(passing)
    cronjobs.health_check("twice")(passing)  # the same function again (a re-import)
    with pytest.raises(ValueError, match="'twice' is registered twice: by .*passing and by "
                                         ".*failing"):
        cronjobs.health_check("twice")(failing)


@SQLITE
def test_a_check_that_raises_or_returns_a_value_is_check_error(make_app, own_checks):
    app = make_app(health_check_modules=("no_such_checks_module",))
    own_checks += ["raises", "returns"]
    cronjobs.health_check("raises")(lambda check: 1 / 0)
    cronjobs.health_check("returns")(lambda check: False)
    names = [n for n, _ in app_checks(app)]
    assert names == ["no_such_checks_module", "raises", "returns"]
    checks = {c.name: c for c in run_health(app, timeout_seconds=2).checks}
    assert checks["raises"].message == "ZeroDivisionError: division by zero"
    assert checks["returns"].message.startswith("TypeError: returned False; a check returns "
                                                "None")
    assert "cannot import health check module no_such_checks_module" in \
        checks["no_such_checks_module"].message
    assert {checks[n].status for n in names} == {CHECK_ERROR}


@SQLITE
def test_a_failing_check_is_alerted_once_and_its_recovery_once(make_app):
    inbox = Inbox()
    T0 = recent_t0()
    clock = FrozenClock(T0)
    app = make_app(clock=clock, alert_webhook_url=inbox.url + "/hook", alert_timeout_seconds=5)
    state = {"down": True}

    def gateway(check) -> None:
        if state["down"]:
            check.fail("the gateway answered 503")

    check = HealthCheck("gateway", gateway, critical=True)
    try:
        for minutes, down in ((0, True), (5, True), (10, True), (15, False), (20, False),
                              (25, False)):
            clock.set(T0 + timedelta(minutes=minutes))
            state["down"] = down
            alerts.process(app, run_health(app, timeout_seconds=2,
                                           checks=[("gateway", check)]))
    finally:
        inbox.close()
    texts = [json.dumps(body) for _, body in inbox.posts]
    assert len(texts) == 2, texts
    assert "check:gateway" in texts[0] and "the gateway answered 503" in texts[0]
    assert "recovered" in texts[1] and "check:gateway" in texts[1]
