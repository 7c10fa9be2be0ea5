"""`/metrics`: the queue in Prometheus terms, read from the database at scrape time.

Gauges (what is true now): rows per queue and status for `pending`, `running`, `failed`
(each capped at 100,000), due rows and the oldest due age per queue, live workers.
Counters and the duration histogram count the rows that *finished* since this dashboard
process started, from any worker on any host: each scrape reads the rows finished since
the previous one (`finished_at`, then id) and adds them, so they move as jobs run.
`retries` adds the attempts beyond the first of each finished row; `timeouts` the rows
that ended failed with a MAX_RUNTIME timeout.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .. import heartbeat, store
from ..app import App

BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600)


class Metrics:
    """One registry per dashboard process; `render()` refreshes it and returns the text.

    Args:
        app: the system to read.
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self.registry = r = CollectorRegistry()
        self.rows = Gauge("cronjobs_rows", "Rows per queue and status (capped at 100,000).",
                          ["queue", "status"], registry=r)
        self.due = Gauge("cronjobs_due_rows", "Due pending rows per queue (capped).", ["queue"],
                         registry=r)
        self.oldest = Gauge("cronjobs_oldest_due_age_seconds",
                            "Age of the oldest due pending row per queue (seconds).", ["queue"],
                            registry=r)
        self.workers = Gauge("cronjobs_live_workers", "Workers with a fresh heartbeat.", registry=r)
        self.finished = Counter("cronjobs_jobs_finished", "Rows that finished, by type and status.",
                                ["type", "status"], registry=r)
        self.retries = Counter("cronjobs_job_retries", "Attempts beyond the first of finished rows.",
                               ["type"], registry=r)
        self.timeouts = Counter("cronjobs_job_timeouts", "Rows failed by a MAX_RUNTIME timeout.",
                                ["type"], registry=r)
        self.duration = Histogram("cronjobs_job_duration_seconds",
                                  "Run time of the last attempt of finished rows (seconds).",
                                  ["type"], buckets=BUCKETS, registry=r)
        self._since = app.clock.now()
        self._after_id = 0
        self._lock = threading.Lock()

    def render(self) -> bytes:
        """Refresh every metric from the database and return the exposition text."""
        with self._lock:
            self._refresh()
            return generate_latest(self.registry)

    def _refresh(self) -> None:
        now = self.app.clock.now()
        with self.app.engine.connect() as conn:
            counts = store.views.rows_by_queue_status(conn)
            due = store.views.due_by_queue(conn, now)
            while True:
                rows = store.views.finished_since(conn, self._since, self._after_id)
                for row in rows:
                    self._count(row)
                if rows:
                    self._since, self._after_id = rows[-1]["finished_at"], rows[-1]["id"]
                if len(rows) < 10_000:
                    break
        self.rows.clear()
        for (queue, status), n in counts.items():
            self.rows.labels(queue, status).set(n)
        self.due.clear()
        self.oldest.clear()
        for queue, d in due.items():
            self.due.labels(queue).set(d["due"])
            age = (now - d["oldest_due_at"]).total_seconds() if d["oldest_due_at"] else 0
            self.oldest.labels(queue).set(max(0.0, age))
        self.workers.set(len(heartbeat.view(self.app).live))

    def _count(self, row: dict) -> None:
        job_type = row["type"]
        self.finished.labels(job_type, row["status"]).inc()
        if row["attempts"] > 1:
            self.retries.labels(job_type).inc(row["attempts"] - 1)
        if row["status"] == "failed" and (row["error"] or "").startswith("timeout after"):
            self.timeouts.labels(job_type).inc()
        if row["started_at"] and row["finished_at"] and row["finished_at"] >= row["started_at"]:
            self.duration.labels(job_type).observe((row["finished_at"] - row["started_at"]).total_seconds())
