"""Uptime check, execute stage: fetch one URL and record status, latency and content."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from jinja2 import Environment
from markupsafe import Markup

from cronjobs import CronJobHandler, Job

_SUMMARY = Environment(autoescape=True).from_string(
    "<table class=\"summary\"><tr><th>URL</th><td>{{ r.url }}</td></tr>"
    "<tr><th>Status</th><td>{{ r.status_code if r.status_code is not none else '-' }}</td></tr>"
    "<tr><th>Latency</th><td>{{ r.latency_ms }} ms</td></tr>"
    "{% if r.expect %}<tr><th>Expected text</th><td>{{ r.expect }}: "
    "{{ 'found' if r.found else 'missing' }}</td></tr>{% endif %}"
    "{% if r.error %}<tr><th>Error</th><td>{{ r.error }}</td></tr>{% endif %}</table>")

MAX_BODY_BYTES = 1_000_000


class HttpUptimeExecute(CronJobHandler):
    """GETs `payload["url"]` with a timeout (seconds, `payload["timeout"]`, default 10).

    Succeeds on a 2xx answer that contains `payload["expect"]` (when given). Result:
    `{"url", "status_code", "latency_ms", "expect", "found", "error"}`; a failed check is
    not retried (MAX_ATTEMPTS 1): the next slot checks again.
    """

    TYPE = "http.uptime.execute"
    MAX_ATTEMPTS = 1
    MAX_RUNTIME = 60

    def handle(self, payload: dict, job: Job) -> dict:
        """Fetch the URL and report what was seen."""
        url, expect = payload["url"], payload.get("expect")
        result = {"url": url, "status_code": None, "latency_ms": None, "expect": expect,
                  "found": None, "error": None}
        started = time.monotonic()
        body = b""
        try:
            with urllib.request.urlopen(url, timeout=float(payload.get("timeout", 10))) as resp:
                result["status_code"] = resp.status
                body = resp.read(MAX_BODY_BYTES)
        except urllib.error.HTTPError as exc:
            result["status_code"] = exc.code
            result["error"] = f"HTTP {exc.code} {exc.reason}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            result["error"] = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        result["latency_ms"] = round((time.monotonic() - started) * 1000, 1)
        if expect:
            result["found"] = expect.encode() in body
        ok = (result["error"] is None and 200 <= (result["status_code"] or 0) < 300
              and result["found"] is not False)
        self.error = result["error"] or (None if ok else "expected text not found")
        return {"success": ok, "result": result, **({} if ok else {"error": self.error})}

    @staticmethod
    def render_summary(result: dict) -> Markup:
        """A small table: URL, status, latency, expected text, error (all escaped)."""
        return Markup(_SUMMARY.render(r=result))
