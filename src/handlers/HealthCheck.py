"""Built-in maintenance: the health report every 5 minutes, and alerts about its problems."""

from __future__ import annotations

from functools import cache

from markupsafe import Markup

from cronjobs import CronJobHandler, Job

_SUMMARY = (
    "<table class=\"summary\"><tr><th>{{ _('Status') }}</th><td class=\"st-{{ r.status }}\">"
    "{{ r.status }}</td></tr>"
    "{% for name, status in (r.checks or {}).items() %}<tr><th>{{ name }}</th>"
    "<td class=\"st-{{ status }}\">{{ status }}</td></tr>{% endfor %}"
    "{% for p in r.problems or [] %}<tr><th>{{ p.key }}</th><td>{{ p.message }}</td></tr>"
    "{% endfor %}<tr><th>{{ _('Alerts sent') }}</th><td>{{ r.alerted or 0 }}</td></tr></table>")


@cache
def _summary_template():
    """The Results table's template, compiled on first use (lazy: CLI start-up time: the
    registry imports this module for every command that dispatches or ticks)."""
    from jinja2 import Environment

    return Environment(autoescape=True).from_string(_SUMMARY)


class HealthCheck(CronJobHandler):
    """Runs the health report (`cronjobs health`) and alerts the configured channels.

    A problem is alerted after `CRONJOBS_ALERT_AFTER_RUNS` (2) failing runs in a row, again
    at most once an hour while it lasts, once as "flapping" when it comes and goes, and
    its recovery after `CRONJOBS_ALERT_RECOVER_AFTER_RUNS` (2) passing runs
    (`cronjobs.health.alertstate`). Alerts go only to
    channels the operator configured (`CRONJOBS_ALERT_*`), so the task ships enabled.
    Result: `{"status", "checks": {name: status}, "problems": [...], "alerted", "delivered"}`.
    """

    TYPE = "cronjobs.health.execute"
    FREQUENCY = "*/5 * * * *"
    MAX_ATTEMPTS = 1
    MAX_RUNTIME = 120
    DISPATCH_SCOPE = "admin"  # POST /api/jobs needs an admin token (docs/api.md)
    QUEUE = "maintenance"

    def handle(self, payload: dict, job: Job) -> dict:
        """Check, alert, and store a summary of the report."""
        from cronjobs.health import alerts, run_health  # lazy: CLI start-up time

        app = self.context.app
        report = run_health(app)
        sent = alerts.process(app, report)
        return {"success": True, "result": {
            "status": report.status, "checks": {c.name: c.status for c in report.checks},
            "problems": [p.__dict__ for p in report.problems],
            "alerted": len(sent.problems) + len(sent.recovered) if sent.delivered else 0,
            "delivered": sent.delivered, "failed_channels": sent.failed}}

    @staticmethod
    def render_summary(result: dict) -> Markup:
        """Status, each check's status, the problems and how many alerts went out (escaped)."""
        from cronjobs.i18n import gettext  # lazy: CLI start-up time

        # labels: Status, Alerts sent
        return Markup(_summary_template().render(r=result, _=gettext))
