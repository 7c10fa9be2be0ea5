"""The handler of the README's five-minute tour."""

from cronjobs import CronJobHandler


class GreetExecute(CronJobHandler):
    TYPE = "tour.greet.execute"   # dotted; the last part is the stage
    MAX_ATTEMPTS = 3              # retried with backoff 2, 4, 8 ... minutes
    MAX_RUNTIME = 30              # seconds
    EXAMPLE_PAYLOAD = {"name": "Ada"}  # the example in the dashboard's Run now box

    def handle(self, payload, job):
        name = payload.get("name", "world")  # a scheduled run's payload is {"slot": ...}
        if not isinstance(name, str) or not name:
            self.error = "name must be non-empty text"
            return False          # retried, then failed, with that error text
        return {"success": True, "result": {"greeting": f"Hello, {name}!", "job": job.id}}
