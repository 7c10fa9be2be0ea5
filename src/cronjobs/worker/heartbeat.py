"""Worker heartbeats in `cronjob_worker`, and the view of live workers per queue.

Heartbeat ages are measured with the database's clock (see `store.workers`), so the
view is the same from every host, whatever its clock says.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

from .. import limits, store
from ..app import App
from ..bounded import within
from ..store.db import run_in_transaction

log = logging.getLogger("cronjobs.worker.loop")

HEARTBEAT_SECONDS = 10
FORGET_SECONDS = 5.0  # how long a stopping worker waits to remove its heartbeat
LIVE_SECONDS = 3 * HEARTBEAT_SECONDS
STALLED = "stalled"  # the status of a worker whose job processes fail to start (its log says why)


def beat(app: App, worker_id: str, queues: list[str], status: str, jobs_done: int,
         current: list[int], memory_mb: float | None = None, slots: int | None = None,
         job_slots: dict[int, int] | None = None) -> None:
    """Write this worker's heartbeat (the database stamps the time; `memory_mb`: memory of
    the worker and its job processes, MB; `slots`: its slots; `job_slots`: `{job id:
    slot}` of its running jobs)."""
    values = {"id": worker_id, "host": socket.gethostname()[:limits.WORKER_HOST_MAX_CHARS],
              "pid": os.getpid(), "queues": ",".join(queues)[:limits.WORKER_LIST_MAX_CHARS],
              "status": status, "jobs_done": jobs_done, "memory_mb": memory_mb,
              "current_jobs": ",".join(map(str, current))[:limits.WORKER_LIST_MAX_CHARS],
              "slots": slots, "job_slots": format_job_slots(job_slots or {})}
    run_in_transaction(app.engine, lambda c: store.beat(c, values))


def format_job_slots(job_slots: dict[int, int]) -> str:
    """`{job id: slot}` as stored in `cronjob_worker.job_slots`: `"id:slot,..."` by slot,
    whole entries only within its 1,000 characters."""
    text = ""
    for job_id, slot in sorted(job_slots.items(), key=lambda item: item[1]):
        entry = f"{job_id}:{slot}"
        if len(text) + len(entry) + 1 > limits.WORKER_LIST_MAX_CHARS:
            break
        text = f"{text},{entry}" if text else entry
    return text


def parse_job_slots(text: str | None) -> dict[int, int]:
    """`cronjob_worker.job_slots` read back as `{job id: slot}` (malformed entries left out)."""
    out = {}
    for entry in (text or "").split(","):
        job_id, _, slot = entry.partition(":")
        if job_id.isdigit() and slot.isdigit():
            out[int(job_id)] = int(slot)
    return out


def forget(app: App, worker_id: str, timeout_seconds: float = FORGET_SECONDS) -> bool:
    """Remove the heartbeat of a worker that stops cleanly, waiting at most
    `timeout_seconds`: a database that accepts connections but never answers (a hung
    server; no read timeout reaches every driver) must not keep a stopping worker from
    exiting. Never raises: a failure or the timeout is logged (the row then ages into
    the dead workers, which `cleanup` removes). Returns True when the row was removed."""
    try:
        within(timeout_seconds, lambda: run_in_transaction(
            app.engine, lambda c: store.forget(c, worker_id)), name="cronjobs-forget")
        return True
    except Exception as exc:  # Late too
        log.warning("could not remove the heartbeat (%s)", exc)
        return False


@dataclass(frozen=True)
class WorkersView:
    """Live and dead workers, and the queues nobody consumes.

    Attributes:
        live: heartbeat rows seen within the last 30 s (each with `age_seconds`).
        dead: older rows (a worker that was killed); `cleanup` removes them after a day.
        unserved: queues of the registered handlers with no live worker.
        orphaned: queues that hold pending rows but have no live worker, each with
            `{"pending": n, "due": n, "oldest_due_at": t}` — rows nobody will run until a
            worker consumes that queue (e.g. the handler that named it was removed).
    """

    live: list[dict]
    dead: list[dict]
    unserved: list[str]
    orphaned: dict[str, dict]

    @property
    def ok(self) -> bool:
        """True when every queue with handlers or pending rows has a live worker."""
        return not self.unserved and not self.orphaned


def view(app: App) -> WorkersView:
    """Read the heartbeats and pending rows; compare them with the registered queues."""
    now = app.clock.now()

    def read(conn) -> tuple[list[dict], dict]:
        rows = store.list_workers(conn, LIVE_SECONDS)
        held = store.running_by_worker(conn, [r["id"] for r in rows if not r["live"]])
        for row in rows:  # a dead worker's last report is stale: what it still holds
            if not row["live"]:
                still = held.get(row["id"], [])
                row["current_jobs"] = ",".join(map(str, still)) or None
                row["job_slots"] = ",".join(
                    pair for pair in (row.get("job_slots") or "").split(",")
                    if pair and int(pair.split(":")[0]) in still) or None
        return rows, store.pending_by_queue(conn, now)

    rows, pending = run_in_transaction(app.engine, read)
    live = [r for r in rows if r["live"]]
    served = {q for r in live for q in r["queues"].split(",") if q}
    return WorkersView(live, [r for r in rows if not r["live"]],
                       [q for q in app.queues() if q not in served],
                       {q: info for q, info in sorted(pending.items()) if q not in served})
