"""TLS certificate expiry, execute stage: read one host's certificate and count days left."""

from __future__ import annotations

import math

from markupsafe import Markup

from cronjobs import CronJobHandler, Job
from cronjobs.i18n import gettext as _
from cronjobs.summary import summary_table
from cronjobs.tlscert import fetch_certificate


class TlsCertExpiryExecute(CronJobHandler):
    """Connects to `payload["host"]:payload["port"]` with SNI and a timeout and stores the
    certificate's subject, issuer, validity and days left.

    Payload: `host`, `port` (default 443), `threshold_days` and `timeout` (seconds;
    defaults from the settings). The check fails (`success: False`, so the row ends
    `failed` and shows) when fewer than `threshold_days` are left, when the server cannot
    be reached, or, with `tls_verify` on, when the certificate does not verify. Not
    retried (MAX_ATTEMPTS 1): the next day checks again. Result: `host`, `port`,
    `subject`, `issuer`, `not_before`, `not_after` (ISO 8601, UTC), `days_left` (whole
    days, negative once expired), `threshold_days`, `verified`, `verify_error`, `error`.
    """

    TYPE = "tls.certexpiry.execute"
    MAX_ATTEMPTS = 1
    MAX_RUNTIME = 60
    DISPATCH_SCOPE = "admin"  # POST /api/jobs needs an admin token (docs/api.md)

    def handle(self, payload: dict, job: Job) -> dict:
        """Fetch the certificate and judge it against the threshold."""
        settings = self.settings
        host, port = payload["host"], int(payload.get("port", 443))
        threshold = float(payload.get("threshold_days", settings.tls.threshold_days))
        result = {"host": host, "port": port, "threshold_days": threshold, "subject": None,
                  "issuer": None, "not_before": None, "not_after": None, "days_left": None,
                  "verified": None, "verify_error": None, "error": None}
        try:
            cert = fetch_certificate(host, port, ca_file=settings.tls.ca_file,
                                     timeout_seconds=float(payload.get(
                                         "timeout", settings.tls.timeout_seconds)))
        except (OSError, ValueError) as exc:
            result["error"] = f"cannot read the certificate of {host}:{port}: " \
                              f"{type(exc).__name__}: {exc}"
            return {"success": False, "result": result, "error": result["error"]}
        left = math.floor((cert.not_after - self.context.now()).total_seconds() / 86400)
        result.update(subject=cert.subject, issuer=cert.issuer, days_left=left,
                      not_before=cert.not_before.isoformat() + "Z",
                      not_after=cert.not_after.isoformat() + "Z", verified=cert.verified,
                      verify_error=cert.verify_error)
        if left < threshold:
            result["error"] = (f"certificate of {host}:{port} expires in {left} days "
                               f"({result['not_after']}), below the threshold of "
                               f"{threshold:g} days")
        elif settings.tls.verify and not cert.verified:
            result["error"] = f"certificate of {host}:{port} does not verify: {cert.verify_error}"
        if result["error"]:
            return {"success": False, "result": result, "error": result["error"]}
        return {"success": True, "result": result}

    @staticmethod
    def render_summary(result: dict) -> Markup:
        """Host, issuer, expiry and days left as a small table (escaped, localized labels)."""
        verified = result.get("verified")
        trusted = None if verified is None else _("Yes") if verified else \
            f"{_('No')}: {result.get('verify_error')}"
        return summary_table([
            (_("Host"), f"{result.get('host')}:{result.get('port')}"),
            (_("Subject"), result.get("subject")),
            (_("Issuer"), result.get("issuer")),
            (_("Expires"), result.get("not_after")),
            (_("Days left"), result.get("days_left")),
            (_("Threshold (days)"), result.get("threshold_days")),
            (_("Trusted"), trusted),
            (_("Error"), result.get("error")),
        ])
