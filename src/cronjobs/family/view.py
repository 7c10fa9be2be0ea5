"""What a family is now: its counts, times and completions, read without touching the
table by hand (`read_family`): the callbacks' `family` argument, `queue.family(id)`, the
family page and `cronjobs family ID`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection

from ..status import FINAL, Status
from ..store import families as rows


@dataclass(frozen=True)
class Family:
    """A family: root row `root_id` and every row under it (callback rows aside).

    Attributes:
        root_id: the root row's id.
        root_type: the root row's type.
        root_status: the root row's status (`completed` ... `running`).
        counts: rows under the root per status, e.g. `{"completed": 270, "failed": 30}`
            (only statuses that have rows).
        reasons: rows under the root per outcome reason the worker decided
            (`status.Reason`, e.g. `{"timeout.killed": 13}`).
        total: rows under the root.
        first_started_at: the root's start (naive UTC; None before it started).
        last_finished_at: the last finish in the family (the root's or a row's), None
            while nothing has finished.
        generation: completions so far (0: not completed yet; a callback sees its own).
        outcome: the last completion's `success`, `failure` or `cancelled`; None before.
        completed_at: when the last completion was decided (naive UTC).
        complete: the root has finished and no row under it is pending or running.
        callbacks: the callback rows (`id`, `type`, `status`, `idempotency_key`).
    """

    root_id: int
    root_type: str
    root_status: str
    counts: dict[str, int]
    reasons: dict[str, int]
    total: int
    first_started_at: datetime | None
    last_finished_at: datetime | None
    generation: int = 0
    outcome: str | None = None
    completed_at: datetime | None = None
    complete: bool = False
    callbacks: list[dict] = field(default_factory=list)

    @property
    def duration_seconds(self) -> float | None:
        """Seconds from the root's start to the family's last finish (None when either
        is unknown)."""
        if self.first_started_at is None or self.last_finished_at is None:
            return None
        return max(0.0, (self.last_finished_at - self.first_started_at).total_seconds())

    @property
    def done(self) -> int:
        """Rows under the root that have finished (completed, failed or cancelled)."""
        return sum(n for status, n in self.counts.items() if status in FINAL)

    def success_ratio(self) -> float:
        """Completed rows over rows under the root (1.0 for a family without any)."""
        return 1.0 if not self.total else self.counts.get(Status.COMPLETED, 0) / self.total


def read_family(conn: Connection, root_id: int) -> Family | None:
    """Family `root_id` as it is now (a few indexed reads); None when the root row is
    gone. A row that has a parent is read as the family of its root.

    Args:
        conn: a connection (any transaction).
        root_id: a row id (the root's, or any row's of the family).
    """
    root = rows.root_row(conn, root_id)
    if root is None:
        return None
    if root["root_id"] is not None:
        return read_family(conn, root["root_id"])
    counts: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for status, reason, n in rows.counts(conn, root_id):
        counts[status] = counts.get(status, 0) + n
        if reason:
            reasons[reason] = reasons.get(reason, 0) + n
    times = rows.times(conn, root_id)
    finishes = [t for t in (times["last_finished_at"], root["finished_at"]) if t is not None]
    completions = rows.completions(conn, root_id)
    last = completions[-1] if completions else None
    unfinished = sum(counts.get(s, 0) for s in (Status.PENDING, Status.WAITING, Status.RUNNING))
    return Family(
        root_id=int(root_id), root_type=root["type"], root_status=root["status"],
        counts=counts, reasons=reasons, total=sum(counts.values()),
        first_started_at=root["started_at"] or times["first_started_at"],
        last_finished_at=max(finishes) if finishes else None,
        generation=len(completions), outcome=last["outcome"] if last else None,
        completed_at=last["completed_at"] if last else None,
        complete=root["status"] in FINAL and not unfinished,
        callbacks=rows.callbacks(conn, root_id))
