"""TLS certificate expiry, discover stage: one execute job per configured host, daily."""

from __future__ import annotations

from markupsafe import Markup

from cronjobs import CronJobHandler, Job
from cronjobs.i18n import gettext as _
from cronjobs.summary import summary_table
from cronjobs.tlscert import parse_target


class TlsCertExpiryDiscover(CronJobHandler):
    """Reads `CRONJOBS_TLS_HOSTS` and dispatches one `tls.certexpiry.execute` per host.

    The idempotency key carries the host, the port and the day (`YYYYMMDD`, UTC), so a
    repeated discover of the same day adds nothing; a manual run checks again. Result:
    `{"dispatched": n, "hosts": [...], "jobs": [...]}`, or `cancelled` with reason
    `no-targets` when no host is configured (the row is then deleted).
    """

    TYPE = "tls.certexpiry.discover"
    FREQUENCY = "day"
    MAX_ATTEMPTS = 3
    MAX_RUNTIME = 60
    DISPATCH_SCOPE = "admin"  # POST /api/jobs needs an admin token (docs/api.md)

    def handle(self, payload: dict, job: Job) -> dict:
        """Dispatch the execute jobs for this day (or for this manual run)."""
        hosts = list(self.settings.tls.hosts)
        if not hosts:
            return {"success": True, "status": "cancelled", "result": {"reason": "no-targets"}}
        day = (payload.get("slot") or "")[:8] or self.context.now().strftime("%Y%m%d")
        run = "" if payload.get("slot") else f":manual-{job.id}"
        ids = []
        for target in hosts:
            host, port = parse_target(target)
            ids.append(self.dispatch(
                "tls.certexpiry.execute",
                {"host": host, "port": port, "threshold_days": self.settings.tls.threshold_days,
                 "timeout": self.settings.tls.timeout_seconds},
                idempotency_key=f"tls.certexpiry:{host}:{port}:{day}{run}"[:191],
                title=f"certificate {host}:{port}"[:255]))
        return {"success": True, "result": {"dispatched": len(ids), "hosts": hosts, "jobs": ids}}

    @staticmethod
    def render_summary(result: dict) -> Markup:
        """Hosts and the number of checks dispatched (escaped, localized labels)."""
        return summary_table([(_("Hosts"), result.get("hosts")),
                              (_("Jobs dispatched"), result.get("dispatched")),
                              (_("Reason"), result.get("reason"))])
