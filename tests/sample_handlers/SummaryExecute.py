"""Test handler: stores its payload as the result; its Results tab depends on `result["mode"]`."""

from markupsafe import Markup

from cronjobs import CronJobHandler


class SummaryExecute(CronJobHandler):
    TYPE = "test.summary.execute"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        if payload.get("fail"):
            self.error = payload["fail"]
            return {"success": False, "result": payload, "error": payload["fail"]}
        return {"success": True, "result": payload}

    @staticmethod
    def render_summary(result):
        mode = result.get("mode")
        if mode == "markup":
            return Markup('<b id="trusted-summary">{}</b>').format(result.get("text", ""))
        if mode == "raise":
            raise ValueError("summary broke <script>alert(1)</script>")
        return f"<b>plain</b> {result.get('text', '')}"
