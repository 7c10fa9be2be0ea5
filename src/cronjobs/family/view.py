"""What a family is now: its counts, times and completions, read without touching the
table by hand (`read_family`): the callbacks' `family` argument, `queue.family(id)`, the
family page and `cronjobs family ID`, with its failures grouped (`failure_key`), its
rate and ETA; `read_families` reads the families of a page of runs (the task page,
`cronjobs tasks`) at once; `family_line` says one in a line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta

from sqlalchemy import Connection

from ..status import FINAL, Status
from ..status import family as reason_family
from ..store import families as rows
from ..store.jobs import live_in_families

RATE_WINDOW_SECONDS = 60  # the rate is the rows finished over the last minute (or since start)
FAILURE_GROUPS_SHOWN = 20  # groups of failures a family shows (the biggest)
EXAMPLE_IDS = 3  # row ids shown per group of failures
FAILURES_SCANNED = 5_000  # the newest failed rows grouped (as the Failed page's groups)


def failure_key(fingerprint: str | None, error: str) -> str:
    """The group of a failed row: its fingerprint when it has one, else its error text
    (first 200 characters)."""
    return fingerprint or error


@dataclass(frozen=True)
class FailureGroup:
    """Failed rows of a family that failed the same way.

    Attributes:
        key: what groups them (`failure_key`: a fingerprint or the error text).
        count: failed rows in the group.
        error: the error text of one of them (the newest), first 200 characters.
        example_ids: up to 3 of their ids, newest first.
    """

    key: str
    count: int
    error: str
    example_ids: list[int]


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
        callbacks: the callback rows (`id`, `type`, `status`, `idempotency_key`,
            `finished_at`), oldest first.
        failed_reasons: failed rows under the root per outcome reason (`timeout.killed`:
            13); a failure the handler raised has none.
        failures: the failed rows grouped (`FailureGroup`, biggest first; at most 20
            groups; the newest 5,000 failed rows), read by `read_family` (empty in
            `read_families`' summaries).
        read_at: when the family was read (naive UTC; None without a clock): `rate_per_second`
            and `eta_seconds` need it.
        finished_recently: rows under the root that finished in the
            `RATE_WINDOW_SECONDS` before `read_at` (None when not read).
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
    failed_reasons: dict[str, int] = field(default_factory=dict)
    failures: list[FailureGroup] = field(default_factory=list)
    read_at: datetime | None = None
    finished_recently: int | None = None

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

    @property
    def progress(self) -> dict[str, int]:
        """Rows under the root per state of a progress bar: `{"completed", "failed",
        "cancelled", "expired", "running", "pending"}` (0 for none; `pending` counts the
        rows waiting for their dependencies too), from `counts`."""
        bar = {s.value: self.counts.get(s, 0) for s in (
            Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.EXPIRED, Status.RUNNING,
            Status.PENDING)}
        bar[Status.PENDING.value] += self.counts.get(Status.WAITING, 0)
        return bar

    @property
    def timeouts(self) -> int:
        """Failed rows under the root that ran past their MAX_RUNTIME (reason `timeout.*`)."""
        return sum(n for reason, n in self.failed_reasons.items()
                   if reason_family(reason) == "timeout")

    @property
    def rate_per_second(self) -> float | None:
        """Rows finished per second: over the last minute before `read_at` (over the time
        since the root started when that is shorter); for a complete family over its whole
        duration. None when unknown (not read with a clock, or not started)."""
        if self.complete:
            seconds = self.duration_seconds
            return self.done / seconds if seconds else None
        if self.read_at is None or self.first_started_at is None or self.finished_recently is None:
            return None
        since_start = (self.read_at - self.first_started_at).total_seconds()
        window = min(float(RATE_WINDOW_SECONDS), since_start)
        if window <= 0:
            return None
        done = self.finished_recently if since_start >= RATE_WINDOW_SECONDS else self.done
        return done / window

    @property
    def eta_seconds(self) -> float | None:
        """Seconds until the rows still pending or running are done at `rate_per_second`
        (0 for a complete family; None while no rate is known or nothing finishes)."""
        if self.complete:
            return 0.0
        rate = self.rate_per_second
        left = sum(self.counts.get(s, 0) for s in (Status.PENDING, Status.WAITING,
                                                    Status.RUNNING))
        return left / rate if rate else None

    def as_dict(self) -> dict:
        """The family as plain values (times stay datetimes), with `progress`,
        `duration_seconds`, `success_ratio`, `timeouts`, `rate_per_second` and
        `eta_seconds`: what `/api/jobs/ID/family` and `cronjobs family ID --json` give."""
        out = asdict(self)
        out.update(progress=self.progress, done=self.done, timeouts=self.timeouts,
                   duration_seconds=self.duration_seconds, success_ratio=self.success_ratio(),
                   rate_per_second=self.rate_per_second, eta_seconds=self.eta_seconds)
        return out


def read_family(conn: Connection, root_id: int, now: datetime | None = None,
                failures: bool = True) -> Family | None:
    """Family `root_id` as it is now (a few indexed reads of `(root_id, status, id)`);
    None when the root row is gone. A row that has a parent is read as the family of its
    root; a callback row (parent the root, no `root_id`) too.

    Args:
        conn: a connection (any transaction).
        root_id: a row id (the root's, or any row's of the family).
        now: naive UTC: read the rows finished in the last minute too, for
            `rate_per_second` and `eta_seconds` (None: not read).
        failures: group the failed rows (`Family.failures`).
    """
    root = rows.root_row(conn, root_id)
    if root is None:
        return None
    if root["root_id"] is not None:
        return read_family(conn, root["root_id"], now, failures)
    if root["parent_id"] is not None:  # a callback row: the family of its root
        return read_family(conn, root["parent_id"], now, failures)
    since = None if now is None else now - timedelta(seconds=RATE_WINDOW_SECONDS)
    seen = rows.summary(conn, root_id, since)  # counts and times in one pass
    completions = rows.completions(conn, root_id)
    fam = _family(root, seen["counts"], seen, completions[-1] if completions else None,
                  len(completions), rows.callbacks(conn, root_id, len(completions)))
    extra = {"read_at": now, "finished_recently": None if now is None
             else seen["finished_since"]}
    if failures:
        extra["failures"] = group_failures(rows.failed_rows(conn, root_id, FAILURES_SCANNED))
    return replace(fam, **extra)


def read_families(conn: Connection, root_ids: Iterable[int]) -> dict[int, Family]:
    """The families of several roots (a task page's runs) in a few statements whatever
    their number: `{root_id: Family}` without `failures`, rate or ETA. Ids that are not a
    root (a row with a parent) or are gone are left out.

    A family whose last completion is recorded and that has no pending or running row
    (a retry after it starts a new generation) is read from its record: its counts as
    recorded, its failed rows' reasons (the failed rows only), the root's start and the
    completion's time; `reasons` then holds the failed rows' only. The others are read
    from their rows (one grouped pass), so a page of 50 runs of 20,000 rows each reads
    the rows of the runs still going only.

    Args:
        conn: a connection.
        root_ids: ids of root rows (keep them under 1,000: one IN list each).
    """
    roots = {i: r for i, r in rows.roots_of(conn, root_ids).items()
             if r["root_id"] is None and r["parent_id"] is None}
    last = rows.last_completions(conn, roots)
    ended = [i for i in last if roots[i]["status"] in FINAL]
    live = live_in_families(conn, ended) if ended else {}
    settled = {i for i in ended if i not in live}
    seen = rows.summaries_of(conn, [i for i in roots if i not in settled])
    seen.update(_recorded(roots, last, settled, rows.failed_reasons_of(conn, settled)))
    callbacks = rows.callbacks_of(conn, {i: c["generation"] for i, c in last.items()})
    empty = {"counts": [], "first_started_at": None, "last_finished_at": None}
    return {i: _family(root, seen.get(i, empty)["counts"], seen.get(i, empty), last.get(i),
                       last[i]["generation"] if i in last else 0, callbacks.get(i, []))
            for i, root in roots.items()}


def _recorded(roots: dict, last: dict, settled: set[int], reasons: dict) -> dict[int, dict]:
    """`summary`s of the settled families from their last completion's record."""
    out = {}
    for i in settled:
        counts = []
        for status, n in last[i]["counts"].items():
            split = reasons.get(i, {}) if status == Status.FAILED else {}
            counts += [(status, reason, m) for reason, m in split.items()]
            if n - sum(split.values()) > 0:
                counts.append((status, None, n - sum(split.values())))
        finished = [t for t in (roots[i]["finished_at"], last[i]["completed_at"]) if t]
        out[i] = {"counts": counts, "first_started_at": roots[i]["started_at"],
                  "last_finished_at": max(finished) if finished else None}
    return out


def _family(root: dict, count_rows: list[tuple], times: dict, last: dict | None,
            generation: int, callbacks: list[dict]) -> Family:
    """A `Family` of its root row, its `(status, reason, n)` counts, its times, its last
    completion and its callback rows."""
    counts: dict[str, int] = {}
    reasons: dict[str, int] = {}
    failed_reasons: dict[str, int] = {}
    for status, reason, n in count_rows:
        counts[status] = counts.get(status, 0) + n
        if reason:
            reasons[reason] = reasons.get(reason, 0) + n
            if status == Status.FAILED:
                failed_reasons[reason] = failed_reasons.get(reason, 0) + n
    finishes = [t for t in (times["last_finished_at"], root["finished_at"]) if t is not None]
    unfinished = sum(counts.get(s, 0) for s in (Status.PENDING, Status.WAITING, Status.RUNNING))
    return Family(
        root_id=int(root["id"]), root_type=root["type"], root_status=root["status"],
        counts=counts, reasons=reasons, total=sum(counts.values()),
        first_started_at=root["started_at"] or times["first_started_at"],
        last_finished_at=max(finishes) if finishes else None,
        generation=generation, outcome=last["outcome"] if last else None,
        completed_at=last["completed_at"] if last else None,
        complete=root["status"] in FINAL and not unfinished,
        callbacks=callbacks, failed_reasons=failed_reasons)


def group_failures(failed: list[tuple], shown: int = FAILURE_GROUPS_SHOWN
                   ) -> list[FailureGroup]:
    """Failed rows `[(id, fingerprint, error)]` (newest first, `store.families
    .failed_rows`) grouped by `failure_key`, biggest group first (then newest), at most
    `shown` groups."""
    groups: dict[str, dict] = {}
    for job_id, fingerprint, error in failed:
        g = groups.setdefault(failure_key(fingerprint, error),
                              {"count": 0, "error": error, "last": job_id, "ids": []})
        g["count"] += 1
        if len(g["ids"]) < EXAMPLE_IDS:
            g["ids"].append(job_id)
    ordered = sorted(groups.items(), key=lambda kv: (-kv[1]["count"], -kv[1]["last"]))
    return [FailureGroup(key, g["count"], g["error"], g["ids"]) for key, g in ordered[:shown]]


def family_line(fam: Family) -> str:
    """The family in one line: `200 children: 176 ok, 24 failed (13 timeouts) — 9.2 s —
    callback completed` (the parts that apply: running, pending and cancelled rows too; a
    duration "so far" while it is not complete; the last callback row's status)."""
    c = fam.counts
    parts = [f"{c.get(Status.COMPLETED, 0):,} ok"] if fam.total else []
    if c.get(Status.FAILED):
        timeouts = f" ({fam.timeouts:,} timeouts)" if fam.timeouts else ""
        parts.append(f"{c[Status.FAILED]:,} failed{timeouts}")
    for status in (Status.CANCELLED, Status.EXPIRED, Status.RUNNING, Status.PENDING,
                   Status.WAITING):
        if c.get(status):
            parts.append(f"{c[status]:,} {status.value}")
    noun = "child" if fam.total == 1 else "children"
    text = f"{fam.total:,} {noun}: " + ", ".join(parts) if fam.total else "no children"
    seconds = fam.duration_seconds
    if seconds is not None:
        text += f" — {seconds:.1f} s" + ("" if fam.complete else " so far")
    if fam.callbacks:
        text += f" — callback {fam.callbacks[-1]['status']}"
    return text
