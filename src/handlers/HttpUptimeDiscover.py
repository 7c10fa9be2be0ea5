"""Uptime check, discover stage: one execute job per configured URL, every minute."""

from __future__ import annotations

from cronjobs import CronJobHandler, Job


class HttpUptimeDiscover(CronJobHandler):
    """Reads `CRONJOBS_UPTIME_URLS` and dispatches one `http.uptime.execute` per URL.

    The idempotency key carries the URL and the slot, so a repeated discover of the same
    slot adds nothing. Result: `{"dispatched": n, "urls": [...]}`, or
    `cancelled` with reason `no-targets` when no URL is configured.
    """

    TYPE = "http.uptime.discover"
    FREQUENCY = "minute"
    MAX_ATTEMPTS = 3
    MAX_RUNTIME = 30

    def handle(self, payload: dict, job: Job) -> dict:
        """Dispatch the execute jobs for this slot (or this manual run)."""
        urls = list(self.settings.uptime_urls)
        if not urls:
            return {"success": True, "status": "cancelled", "result": {"reason": "no-targets"}}
        slot = payload.get("slot") or f"manual-{job.id}"
        ids = [self.dispatch("http.uptime.execute",
                             {"url": url, "expect": self.settings.uptime_expect,
                              "timeout": self.settings.uptime_timeout_seconds},
                             idempotency_key=f"http.uptime:{url}:{slot}"[:191],
                             title=f"uptime {url}"[:255])
               for url in urls]
        return {"success": True, "result": {"dispatched": len(ids), "urls": urls, "jobs": ids}}
