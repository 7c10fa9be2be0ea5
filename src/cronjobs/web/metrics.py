"""`/metrics`: the queue in Prometheus terms.

Two kinds of series, and the HELP text of each says which:

- **From the database** (gauges; every dashboard process gives the same values at the same
  instant): rows per queue and status (`pending`, `running`, `failed`; capped at 10,000 per
  queue), rows per status (the Queue page's counts), due rows and the oldest due age per
  queue, live workers, `.execute` rows completed in the last hour and day (the Queue page's
  throughput), rows failed in the last hour (what the health check warns about), due rows
  held by flow control per queue, type and reason (`paused`, `blocked`, `limited`).
- **Per process** (counters and the duration histogram): rows that finished since this
  dashboard process started, from any worker on any host; each scrape reads the rows
  finished since the previous one (`finished_at`, then id). Two processes started at
  different times give different values: scrape one, or use the gauges.

Labels are bounded by the configuration, not by the rows: `type` is a registered handler
type or `other`; `queue` is a queue of a registered handler, the default queue, a queue a
live worker consumes, or `other` (rows of a removed handler). The series are built by a
collector of our own, so no `_created` series are exposed.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .. import store
from ..app import App
from ..flow.state import held_now
from ..status import Status
from ..status import family as reason_family
from ..store import stats
from ..worker import heartbeat
from .view import handler_registry

BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600)
OTHER = "other"
DB = "From the database, the same in every dashboard process."
PER_PROCESS = ("Per process: counts rows finished since this dashboard process started (any "
               "worker, any host); processes started at different times differ. Unregistered "
               "types are type=\"other\".")


class Tally:
    """Per-process totals of finished rows, by (bounded) type.

    Attributes:
        finished: `{(type, status): rows}`.
        retries: `{type: attempts beyond the first}`.
        timeouts: `{type: rows failed by a MAX_RUNTIME timeout}` (their `outcome_reason`
            is of the `timeout` family, however the job was stopped).
        durations: `{type: [count per bucket of BUCKETS and +Inf, sum of seconds]}`.
    """

    def __init__(self) -> None:
        self.finished: dict[tuple[str, str], int] = defaultdict(int)
        self.retries: dict[str, int] = defaultdict(int)
        self.timeouts: dict[str, int] = defaultdict(int)
        self.durations: dict[str, list] = {}

    def add(self, row: dict, job_type: str) -> None:
        """Count one finished row (`views.finished_since` shape) under `job_type`."""
        self.finished[(job_type, row["status"])] += 1
        if row["attempts"] > 1:
            self.retries[job_type] += row["attempts"] - 1
        if row["status"] == Status.FAILED and reason_family(row["outcome_reason"]) == "timeout":
            self.timeouts[job_type] += 1
        started, finished = row["started_at"], row["finished_at"]
        if started and finished and finished >= started:
            seconds = (finished - started).total_seconds()
            counts = self.durations.setdefault(job_type, [[0] * (len(BUCKETS) + 1), 0.0])
            counts[0][next((i for i, b in enumerate(BUCKETS) if seconds <= b), len(BUCKETS))] += 1
            counts[1] += seconds

    def families(self) -> list:
        """The per-process counter and histogram families."""
        finished = CounterMetricFamily("cronjobs_jobs_finished", "Rows that finished, by type "
                                       "and status. " + PER_PROCESS, labels=["type", "status"])
        for (job_type, status), n in sorted(self.finished.items()):
            finished.add_metric([job_type, status], n)
        retries = CounterMetricFamily("cronjobs_job_retries", "Attempts beyond the first of "
                                      "finished rows. " + PER_PROCESS, labels=["type"])
        timeouts = CounterMetricFamily("cronjobs_job_timeouts", "Rows failed by a MAX_RUNTIME "
                                       "timeout. " + PER_PROCESS, labels=["type"])
        for family, values in ((retries, self.retries), (timeouts, self.timeouts)):
            for job_type, n in sorted(values.items()):
                family.add_metric([job_type], n)
        duration = HistogramMetricFamily("cronjobs_job_duration_seconds", "Run time of the last "
                                         "attempt of finished rows (seconds). " + PER_PROCESS,
                                         labels=["type"])
        for job_type, (counts, total) in sorted(self.durations.items()):
            cumulative, buckets = 0, []
            for bound, n in zip([*BUCKETS, float("inf")], counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else str(float(bound)), cumulative))
            duration.add_metric([job_type], buckets, total)
        return [finished, retries, timeouts, duration]


class Metrics:
    """The `/metrics` of one dashboard process; `render()` reads the database and returns
    the exposition text.

    Args:
        app: the system to read (its registered handlers bound the `type` and `queue` labels).
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self.tally = Tally()
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self._gauges: list = []
        self._since = app.clock.now()
        self._after_id = 0
        self._lock = threading.Lock()

    def render(self) -> bytes:
        """Read the database, count the rows finished since the last scrape, return the text."""
        with self._lock:
            self._gauges = self._read()
            return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """The families of the last `render` (prometheus_client's collector protocol)."""
        yield from self._gauges
        yield from self.tally.families()

    def _read(self) -> list:
        now = self.app.clock.now()
        types = set(handler_registry(self.app).registered_handlers())
        with self.app.engine.connect() as conn:  # heartbeats only: never every pending row
            live = [w for w in stats.heartbeats(conn, heartbeat.LIVE_SECONDS) if w["live"]]
        queues = set(self.app.queues()) | {q for w in live for q in w["queues"].split(",") if q}
        with self.app.engine.connect() as conn:
            counts = store.queues.rows_by_queue_status(conn, queues=queues, other=OTHER)
            due = store.queues.due_by_queue(conn, now, queues=queues, other=OTHER)
            statuses = store.views.count_by_status(conn)
            speed = store.views.throughput(conn, now)
            failed = store.views.failed_counts(conn, now - timedelta(hours=1))["since"][0]
            at = store.flow.flow_now(conn, self.app.clock)  # as the claims judge
            held = held_now(self.app, conn, at, store.flow.list_pauses(conn, at),
                            store.flow.list_blocks(conn, at))
            while True:
                rows = store.views.finished_since(conn, self._since, self._after_id)
                for row in rows:
                    self.tally.add(row, row["type"] if row["type"] in types else OTHER)
                if rows:
                    self._since, self._after_id = rows[-1]["finished_at"], rows[-1]["id"]
                if len(rows) < 10_000:
                    break
        return [*_queue_gauges(counts, due, now),
                _gauge("cronjobs_live_workers", "Workers with a fresh heartbeat.", [],
                       {(): len(live)}),
                _gauge("cronjobs_status_rows", "Rows per status, all queues (capped at 10,000; "
                       "the Queue page's counts).", ["status"],
                       {(status,): n for status, (n, _) in statuses.items()}),
                _gauge("cronjobs_completed_execute_rows", "Execute rows completed within the last "
                       "window (1h, 24h; the Queue page's throughput; capped at 100,000).",
                       ["window"], {("1h",): speed["hour"][0], ("24h",): speed["day"][0]}),
                _gauge("cronjobs_failed_rows_last_hour", "Rows that failed within the last hour "
                       "(capped at 10,000).", [], {(): failed}),
                _held_gauge(held, types, queues)]


def _queue_gauges(counts: dict, due: dict, now: datetime) -> list:
    """Rows, due rows and oldest due age per queue (the store already put unknown queues
    under `other`)."""
    ages = {(queue,): max(0.0, (now - d["oldest_due_at"]).total_seconds()) if d["oldest_due_at"]
            else 0.0 for queue, d in due.items()}
    return [_gauge("cronjobs_rows", "Rows per queue and status (capped at 10,000 per queue).",
                   ["queue", "status"], counts),
            _gauge("cronjobs_due_rows", "Due pending rows per queue (capped at 1,000 per queue).",
                   ["queue"], {(queue,): d["due"] for queue, d in due.items()}),
            _gauge("cronjobs_oldest_due_age_seconds", "Age of the oldest due pending row per "
                   "queue (seconds).", ["queue"], ages)]


def _held_gauge(held: list[dict], types: set[str], queues: set[str]) -> GaugeMetricFamily:
    """Due rows held by a pause, a block or a full concurrency limit, per queue, type and
    reason (`paused`, `blocked`, `limited`); never per limit key. Unregistered types and
    unknown queues are `other`."""
    values: dict[tuple[str, str, str], int] = defaultdict(int)
    for h in held:
        key = (h["queue"] if h["queue"] in queues else OTHER,
               h["type"] if h["type"] in types else OTHER, h["reason"])
        values[key] += h["rows"]
    return _gauge("cronjobs_held_rows", "Due pending rows held by a pause, a block, a full "
                  "concurrency limit or a rate limit, per queue, type and reason (capped at "
                  "10,000 per pause, blocked type or limited type or queue).",
                  ["queue", "type", "reason"], values)


def _gauge(name: str, doc: str, labels: list[str], values: dict) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, f"{doc} {DB}", labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family
