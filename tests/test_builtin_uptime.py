"""The `http-uptime` task against a real local HTTP server: several URLs from the
configuration (`uptime_urls` and `[[uptime_checks]]`), expected status code (a 3xx
without following it), expected text, timeouts, and its Results tab."""

from __future__ import annotations

import json
import re
import textwrap
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cronjobs import queue
from cronjobs.clock import FrozenClock
from cronjobs.config import Settings, UptimeCheck
from cronjobs.errors import ConfigError
from cronjobs.i18n import use_locale
from cronjobs.schedule.scheduler import tick
from cronjobs.testing import drain
from handlers.HttpUptimeExecute import HttpUptimeExecute

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
T0 = datetime(2026, 1, 5, 12, 0)


class Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(2)
        status, body, headers = {
            "/ok": (200, "all good", {}),
            "/slow": (200, "late", {}),
            "/down": (503, "down for maintenance", {}),
            "/moved": (301, "", {"Location": "/ok"}),
        }.get(self.path, (404, "no such page", {}))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def base():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def check(app, **payload) -> dict:
    job_id = queue.dispatch("http.uptime.execute", payload, app=app)
    queue.process(job_id, app=app)
    row = queue.get(job_id, app=app)
    row["result"] = json.loads(row["result_payload"])
    return row


@SQLITE
def test_expected_status_and_text(make_app, base):
    app = make_app(clock=FrozenClock(T0))
    ok = check(app, url=base + "/ok", expect="all good")
    assert ok["status"] == "completed"
    assert ok["result"] == {**ok["result"], "status_code": 200, "found": True, "error": None,
                            "expect_status": None}
    missing = check(app, url=base + "/ok", expect="welcome")
    assert (missing["status"], missing["error"]) == ("failed", "expected text 'welcome' not found")
    down = check(app, url=base + "/down")
    assert (down["status"], down["error"], down["result"]["status_code"]) == (
        "failed", "HTTP 503", 503)
    # a maintenance page that must answer 503 with its text: expected, so it succeeds
    maintenance = check(app, url=base + "/down", expect_status=503, expect="maintenance")
    assert maintenance["status"] == "completed"
    wrong = check(app, url=base + "/ok", expect_status=204)
    assert (wrong["status"], wrong["error"]) == ("failed", "expected status 204, got 200")


@SQLITE
def test_an_expected_redirect_is_not_followed(make_app, base):
    app = make_app(clock=FrozenClock(T0))
    moved = check(app, url=base + "/moved", expect_status=301)
    assert (moved["status"], moved["result"]["status_code"]) == ("completed", 301)
    followed = check(app, url=base + "/moved", expect="all good")
    assert (followed["status"], followed["result"]["status_code"]) == ("completed", 200)


@SQLITE
def test_timeout_and_refused_connection_fail_the_check(make_app, base):
    app = make_app(clock=FrozenClock(T0))
    started = time.monotonic()
    slow = check(app, url=base + "/slow", timeout=0.3)
    assert slow["status"] == "failed" and "timed out" in slow["error"]
    assert time.monotonic() - started < 1.8
    refused = check(app, url="http://127.0.0.1:9/")
    assert refused["status"] == "failed" and "Connection refused" in refused["error"]
    assert refused["result"]["status_code"] is None


@SQLITE
def test_a_payload_without_a_url_fails_saying_so(make_app):
    app = make_app(clock=FrozenClock(T0))
    for payload in ({}, {"url": 5}):
        job_id = queue.dispatch("http.uptime.execute", payload, app=app)
        queue.process(job_id, app=app)
        row = queue.get(job_id, app=app)
        assert row["status"] == "failed" and row["attempts"] == 1, row
        assert row["error"] == f'the payload needs "url", the address to check; got {payload!r}'


@SQLITE
def test_several_urls_from_configuration_fan_out(make_app, base):
    checks = (UptimeCheck(url=base + "/down", expect_status=503, expect_text="maintenance"),
              UptimeCheck(url=base + "/moved", expect_status=301))
    app = make_app(clock=FrozenClock(T0), uptime_urls=(base + "/ok", base + "/missing"),
                   uptime_expect="good", uptime_checks=checks)
    started = {t: j for t, _, j in tick(T0, app=app).started}
    drain(app)
    discover = queue.get(started["http-uptime"], app=app)
    result = json.loads(discover["result_payload"])
    assert result["urls"] == [base + p for p in ("/ok", "/missing", "/down", "/moved")]
    rows = [queue.get(j, app=app) for j in result["jobs"]]
    payloads = [json.loads(r["payload"]) for r in rows]
    assert [(p["expect"], p["expect_status"]) for p in payloads] == [
        ("good", None), ("good", None), ("maintenance", 503), (None, 301)]
    assert [r["status"] for r in rows] == ["completed", "failed", "completed", "completed"]
    assert rows[1]["error"] == "HTTP 404; expected text 'good' not found"
    assert all(r["parent_id"] == discover["id"] for r in rows)


def test_checks_from_toml_and_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cronjobs.toml").write_text(textwrap.dedent("""
        uptime_urls = ["https://a.example/health"]
        uptime_expect_status = 200

        [[uptime_checks]]
        url = "https://b.example/"
        expect_status = 301

        [[uptime_checks]]
        url = "https://c.example/status"
        expect_text = "operational"
    """))
    settings = Settings.load({})
    assert settings.uptime.expect_status == 200
    assert settings.uptime.checks == (UptimeCheck(url="https://b.example/", expect_status=301),
                                      UptimeCheck(url="https://c.example/status",
                                                  expect_text="operational"))
    env = Settings.load({"CRONJOBS_UPTIME_CHECKS": '[{"url": "https://d.example/"}]'})
    assert env.uptime.checks == (UptimeCheck(url="https://d.example/"),)
    with pytest.raises(ConfigError, match="uptime_checks.*not a JSON list"):
        Settings.load({"CRONJOBS_UPTIME_CHECKS": "https://d.example/"})
    with pytest.raises(ConfigError, match="expect_stauts"):
        Settings.load({"CRONJOBS_UPTIME_CHECKS":
                       '[{"url": "https://x.example/", "expect_stauts": 200}]'})
    with pytest.raises(ConfigError, match="uptime_expect_status='99'"):
        Settings.load({"CRONJOBS_UPTIME_EXPECT_STATUS": "99"})


@pytest.mark.parametrize("bad, reason", [
    ("not-a-url", "is not an http:// or https:// URL with a host"),
    ("not a url", "contains a space or a control character"),
    ("ftp://files.example/x", "is not an http:// or https:// URL with a host"),
    ("https://", "is not an http:// or https:// URL with a host"),
    ("https://a.example:99999/", "is not a URL that can be read"),
    ("https://exa mple.com/", "contains a space or a control character"),
    ("http://a.com/\nx", "contains a space or a control character"),
    ("http://127.0.0.1:0/", "names port 0"),
])
def test_a_url_the_check_could_never_get_is_refused_at_start(bad, reason):
    """Refused when the settings are read (exit 2 in the CLI), not at the check's run."""
    with pytest.raises(ConfigError, match=re.escape(f"{bad!r} {reason}")):
        Settings.load({"CRONJOBS_UPTIME_URLS": f"https://ok.example/,{bad}"})
    with pytest.raises(ConfigError, match=re.escape(f"{bad!r} {reason}")):
        Settings.load({"CRONJOBS_UPTIME_CHECKS": json.dumps([{"url": bad}])})


def test_results_tab_is_an_escaped_table_in_english_and_turkish():
    result = {"url": "http://x/<script>", "status_code": 503, "expect_status": None,
              "latency_ms": 12.5, "expect": "<ok>", "found": False, "error": "HTTP 503"}
    html = str(HttpUptimeExecute.render_summary(result))
    assert "http://x/&lt;script&gt;" in html and "<script>" not in html
    assert "<th>Expected text</th><td>&lt;ok&gt;: missing</td>" in html
    assert "<th>Expected status</th><td>any 2xx</td>" in html
    with use_locale("tr"):
        turkish = str(HttpUptimeExecute.render_summary(result))
    assert "<th>Durum kodu</th><td>503</td>" in turkish
    assert "&lt;ok&gt;: bulunamadı" in turkish and "herhangi bir 2xx" in turkish
