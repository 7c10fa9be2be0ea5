"""Test handler: returns (or raises) whatever shape `payload["shape"]` names."""

from cronjobs import CronJobHandler, RetryLater


class ShapeExecute(CronJobHandler):
    TYPE = "test.shape.execute"
    MAX_ATTEMPTS = 3

    def handle(self, payload, job):
        shape = payload["shape"]
        if shape == "true":
            return True
        if shape == "false":
            if payload.get("attr"):
                setattr(self, payload["attr"], f"{payload['attr']} text")
            return False
        if shape == "raise":
            raise ValueError("boom from handler")
        if shape == "dict_ok":
            return {"success": True, "result": {"answer": 42}}
        if shape == "dict_fail":
            return {"success": False, "result": {"reason": "service-gone"}}
        if shape == "dict_fail_no_retry":
            return {"success": False, "retry": False, "error": "bad input: path is not a folder",
                    "result": {"path": payload.get("path")}}
        if shape == "spawn":  # dispatches a child row, then succeeds
            self.dispatch("test.shape.execute", {"shape": "true"})
            return True
        if shape == "cancel":
            if payload.get("children"):
                self.dispatch("test.shape.execute", {"shape": "true"})
            return {"success": True, "status": "cancelled", "result": {"reason": "no-targets"}}
        if shape == "raise_big":  # a multi-megabyte message with NUL, a lone surrogate, Persian
            raise ValueError("big " + "x" * payload["size"] + "\x00\udc80 سلام 🎉 end")
        if shape == "retry_later":
            raise RetryLater(payload.get("delay", 30), payload.get("reason", "rate limited"))
        if shape == "deep_result":  # a result nested payload["depth"] levels
            deep = {}
            for _ in range(payload["depth"] - 1):
                deep = {"d": deep}
            return {"success": True, "result": deep}
        if shape == "unpicklable":  # JSON can hold its text (default=str), pickle cannot
            import threading

            return {"success": True, "result": {"lock": threading.Lock()}}
        if shape == "none":
            return None
        if shape == "string":
            return "done"
        if shape == "list":
            return [1, 2]
        raise AssertionError(f"unknown shape {shape!r}")
