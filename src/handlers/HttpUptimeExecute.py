"""Uptime check, execute stage: fetch one URL and judge its status code and content."""

from __future__ import annotations

import time

from markupsafe import Markup

from cronjobs import CronJobHandler, Job
from cronjobs.i18n import gettext as _
from cronjobs.summary import summary_table

MAX_BODY_BYTES = 1_000_000


class HttpUptimeExecute(CronJobHandler):
    """GETs `payload["url"]` with a timeout (seconds, `payload["timeout"]`, default 10).

    Succeeds when the status is `payload["expect_status"]` (default: any 2xx; an expected
    3xx is checked without following the redirect) and the body's first megabyte contains
    `payload["expect"]` (when given). Result: `{"url", "status_code", "expect_status",
    "latency_ms", "expect", "found", "error"}`; a failed check is not retried
    (MAX_ATTEMPTS 1): the next slot checks again.
    """

    TYPE = "http.uptime.execute"
    MAX_ATTEMPTS = 1
    MAX_RUNTIME = 60
    DISPATCH_SCOPE = "admin"  # POST /api/jobs needs an admin token (docs/api.md)

    def handle(self, payload: dict, job: Job) -> dict:
        """Fetch the URL and report what was seen; a payload without a `url` string fails
        at once with that said (not retried: MAX_ATTEMPTS 1)."""
        url, expect = payload.get("url"), payload.get("expect")
        if not isinstance(url, str) or not url:
            self.error = f'the payload needs "url", the address to check; got {payload!r:.200}'
            return {"success": False, "error": self.error}
        expect_status = payload.get("expect_status")
        result = {"url": url, "status_code": None, "expect_status": expect_status,
                  "latency_ms": None, "expect": expect, "found": None, "error": None}
        started = time.monotonic()
        import urllib.error  # lazy: a worker that never runs a check does not load urllib

        try:
            result["status_code"], body = _fetch(url, float(payload.get("timeout", 10)),
                                                 follow=not 300 <= (expect_status or 0) < 400)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            result["error"] = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            body = b""
        result["latency_ms"] = round((time.monotonic() - started) * 1000, 1)
        status = result["status_code"]
        problems = []
        if status is not None:
            if expect_status is not None and status != expect_status:
                problems.append(f"expected status {expect_status}, got {status}")
            elif expect_status is None and not 200 <= status < 300:
                problems.append(f"HTTP {status}")
            if expect:
                result["found"] = expect.encode() in body
                if not result["found"]:
                    problems.append(f"expected text {expect!r} not found")
        result["error"] = result["error"] or "; ".join(problems) or None
        if result["error"]:
            self.error = result["error"]
            return {"success": False, "result": result, "error": self.error}
        return {"success": True, "result": result}

    @staticmethod
    def render_summary(result: dict) -> Markup:
        """URL, status, latency, expectations and error as a small table (escaped)."""
        expect = result.get("expect")
        found = None if result.get("found") is None else _("found") if result["found"] \
            else _("missing")
        return summary_table([
            (_("URL"), result.get("url")),
            (_("Status code"), result.get("status_code") if result.get("status_code")
             is not None else "-"),
            (_("Expected status"), result.get("expect_status") or _("any 2xx")),
            (_("Latency (ms)"), result.get("latency_ms")),
            (_("Expected text"), f"{expect}: {found}" if expect else None),
            (_("Error"), result.get("error")),
        ])


def _fetch(url: str, timeout: float, follow: bool) -> tuple[int, bytes]:
    """GET `url`; returns (status, first MAX_BODY_BYTES of the body), 4xx/5xx included; a
    3xx is reported as it is unless `follow`."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(*(() if follow else (NoRedirect,)))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.status, resp.read(MAX_BODY_BYTES)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read(MAX_BODY_BYTES)
