"""Uptime check, discover stage: one execute job per configured URL, every minute."""

from __future__ import annotations

from markupsafe import Markup

from cronjobs import CronJobHandler, Job
from cronjobs.i18n import gettext as _
from cronjobs.summary import summary_table


class HttpUptimeDiscover(CronJobHandler):
    """Dispatches one `http.uptime.execute` per configured URL.

    Targets: every URL of `CRONJOBS_UPTIME_URLS` (expecting `uptime_expect_status`, or any
    2xx, and `uptime_expect` text when set), then every `[[uptime_checks]]` entry with its
    own `expect_status` / `expect_text`. When neither is configured and the job runs in
    `cronjobs serve`, the server's own `/health` (`context.serve_url`), so a fresh install
    does real work with no internet. With none of these the task is idle (`idle`): the
    scheduler starts no slot of it (no row made and deleted every minute); a manual run
    still runs and ends `cancelled`. The idempotency key carries the URL and the slot,
    so a repeated discover of the same slot adds nothing. Result: `{"dispatched": n,
    "urls": [...], "jobs": [...]}`, or `cancelled` with reason `no-targets` when no URL
    is configured.
    """

    TYPE = "http.uptime.discover"
    FREQUENCY = "minute"
    MAX_ATTEMPTS = 3
    MAX_RUNTIME = 30
    DISPATCH_SCOPE = "admin"  # POST /api/jobs needs an admin token (docs/api.md)

    IDLE_NOTE = "no URLs to check: set CRONJOBS_UPTIME_URLS or [[uptime_checks]]"

    @classmethod
    def idle(cls, app) -> str | None:
        """`IDLE_NOTE` when there is nothing to check: no `uptime.urls`, no
        `uptime.checks`, and `app` is not the one `cronjobs serve` runs (`app.serve_url`
        unset); None otherwise.

        Args:
            app: the `cronjobs.app.App` asking (its settings and `serve_url`).

        Returns:
            The note, or None when the task has targets.
        """
        uptime = app.settings.uptime
        if uptime.urls or uptime.checks or getattr(app, "serve_url", None):
            return None
        return cls.IDLE_NOTE

    def targets(self) -> list[dict]:
        """The execute payloads: `{"url", "expect", "expect_status", "timeout"}` each."""
        settings = self.settings
        timeout = settings.uptime.timeout_seconds
        urls = settings.uptime.urls
        if not urls and not settings.uptime.checks and self.context.serve_url:
            urls = (self.context.serve_url + "/health",)
        targets = [{"url": url, "expect": settings.uptime.expect,
                    "expect_status": settings.uptime.expect_status, "timeout": timeout}
                   for url in urls]
        targets += [{"url": check.url, "expect": check.expect_text,
                     "expect_status": check.expect_status, "timeout": timeout}
                    for check in settings.uptime.checks]
        return targets

    def handle(self, payload: dict, job: Job) -> dict:
        """Dispatch the execute jobs for this slot (or this manual run)."""
        targets = self.targets()
        if not targets:
            return {"success": True, "status": "cancelled", "result": {"reason": "no-targets"}}
        slot = payload.get("slot") or f"manual-{job.id}"
        ids = [self.dispatch("http.uptime.execute", target,
                             idempotency_key=f"http.uptime:{n}:{target['url']}:{slot}"[:191],
                             title=f"uptime {target['url']}"[:255])
               for n, target in enumerate(targets)]
        urls = [t["url"] for t in targets]
        return {"success": True, "result": {"dispatched": len(ids), "urls": urls, "jobs": ids}}

    @staticmethod
    def render_summary(result: dict) -> Markup:
        """The URLs and the number of checks dispatched (escaped, localized labels)."""
        return summary_table([(_("URLs"), result.get("urls")),
                              (_("Jobs dispatched"), result.get("dispatched")),
                              (_("Reason"), result.get("reason"))])
