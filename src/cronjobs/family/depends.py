"""Dependencies: a row dispatched with `depends_on=[ids]` waits (`waiting`) until those
rows have finished, then becomes `pending` in the transaction that finished the last of
them; a failed or cancelled dependency cancels it (reason `dependency_failed`, no attempt
used) unless it was dispatched with `allow_failed=True`.

- At dispatch (`admit`): the dependencies are locked (so none can finish unseen before
  the new row commits), missing ids and cycles refused, and the row's first status
  decided (`waiting`; `pending` when every dependency has finished already; `cancelled`
  when one failed).
- At every finish (`after_finish`, called in the finishing transaction by the outcome
  writer, an operator's cancel, recover-stale): one indexed read finds the rows that
  depend on the finished ones (nothing more when there are none); each `waiting` one is
  locked in ascending id order, its dependencies read, and it is released or cancelled.
  A cancel is a finish too: its own dependents follow, in the same transaction
  (`MAX_CASCADE` levels).
- A dependency on a family root with children waits for the whole family: the root's own
  finish does not release its dependents; the family's completion does
  (`release_after_family`, called by `cronjobs.family.settle`). When another dependency
  finishes later, such a root counts as finished once its family has completed
  (`cronjob_family` has a row for it and no row of the family is unfinished).

Race-freedom: see `cronjobs.store.dependencies`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection

from ..errors import InvalidJob
from ..status import FINAL, Ended, Reason, Status
from ..store import dependencies as deps

__all__ = ["MAX_DEPENDENCIES", "Admission", "Settled", "admit", "after_finish",
           "check_ids", "record", "release_after_family", "release_ready",
           "settle_family_dependents", "waiting_for"]

MAX_DEPENDENCIES = 1000  # ids in one row's depends_on
MAX_CASCADE = 100  # levels of dependents cancelled in turn in one transaction
_WALK_LIMIT = 10_000  # rows visited by the cycle check
_BAD = (Status.FAILED, Status.CANCELLED, Status.EXPIRED, Ended.DELETED)
_SUCCESS = "success"


@dataclass
class Settled:
    """What a finish did to the rows waiting for it.

    Attributes:
        released: `(id, queue)` of the rows made `pending`: ring their queues after the
            commit (`dispatching.send`).
        cancelled: `(id, root_id)` of the rows cancelled because a dependency failed (each
            is a finished row: a family member among them may complete its family).
        ended: the rows cancelled, as dicts with `unrun.WEBHOOK_COLUMNS` (their webhooks:
            the caller, which holds the App, inserts them with `unrun.insert_deliveries`).
    """

    released: list[tuple[int, str]] = field(default_factory=list)
    cancelled: list[tuple[int, int | None]] = field(default_factory=list)
    ended: list[dict] = field(default_factory=list)

    def add(self, other: Settled) -> None:
        """Append `other`'s rows to this one's."""
        self.released += other.released
        self.cancelled += other.cancelled
        self.ended += other.ended


@dataclass(frozen=True)
class Admission:
    """How a new row with dependencies starts (`admit`).

    Attributes:
        status: `waiting`, `pending` (every dependency finished well) or `cancelled`.
        error: for `cancelled`, why (`dependency 12 failed`).
    """

    status: Status
    error: str | None = None


def check_ids(depends_on: object) -> list[int]:
    """`depends_on` as a sorted list of distinct row ids (empty for None).

    Raises:
        InvalidJob: not a list of positive integers, or more than `MAX_DEPENDENCIES`.
    """
    if depends_on is None:
        return []
    if isinstance(depends_on, (str, bytes, dict)) or not isinstance(depends_on, Iterable):
        raise InvalidJob(f"depends_on must be a list of job ids, got {depends_on!r:.80}")
    ids = list(depends_on)
    bad = [i for i in ids if not isinstance(i, int) or isinstance(i, bool) or not 1 <= i < 2**63]
    if bad:
        raise InvalidJob(f"depends_on must hold job ids (positive integers), got {bad[0]!r:.80}")
    if len(set(ids)) > MAX_DEPENDENCIES:
        raise InvalidJob(f"depends_on may name at most {MAX_DEPENDENCIES} jobs, got {len(ids)}")
    return sorted(set(ids))


def admit(conn: Connection, depends_on: Sequence[int], *, root_id: int | None,
          allow_failed: bool = False) -> Admission:
    """Lock the dependencies of a new row (in the caller's transaction, before its insert)
    and decide its first status.

    Args:
        depends_on: `check_ids`' ids (not empty).
        root_id: the new row's family root (None for a parentless row).
        allow_failed: a failed or cancelled dependency does not cancel the row.

    Raises:
        InvalidJob: `depends_on: job(s) 12, 15 do not exist`; a dependency that would
            wait for the new row itself (its family root, or a row waiting for it).
    """
    found = deps.rows(conn, depends_on, lock=True)
    missing = [i for i in depends_on if i not in found]
    if missing:
        raise InvalidJob(f"depends_on: job(s) {', '.join(map(str, missing))} do not exist")
    if root_id is not None:
        _refuse_cycle(conn, depends_on, root_id)
    states = {i: _state(conn, i, found[i], {}) for i in depends_on}
    bad = [i for i, (done, ok, _) in states.items() if done and not ok]
    if bad and not allow_failed:
        return Admission(Status.CANCELLED, f"dependency {bad[0]} {states[bad[0]][2]}")
    if all(done for done, _, _ in states.values()):
        return Admission(Status.PENDING)
    return Admission(Status.WAITING)


def record(conn: Connection, job_id: int, depends_on: Sequence[int], allow_failed: bool) -> None:
    """Write the dependencies of new row `job_id` (after its insert, same transaction)."""
    deps.add(conn, [(job_id, on, allow_failed) for on in depends_on])


def _refuse_cycle(conn: Connection, depends_on: Sequence[int], root_id: int) -> None:
    """Refuse dependencies that wait, directly or through others, for the family root
    `root_id` of the new row: the family cannot end before the new row does.

    The walk follows what an unfinished row waits for: its own dependencies, and for a
    root the `waiting` rows of its family; at most `_WALK_LIMIT` rows.

    Raises:
        InvalidJob: naming the dependency and the root.
    """
    for start in depends_on:
        seen: set[int] = set()
        todo = [start]
        while todo and len(seen) < _WALK_LIMIT:
            row_id = todo.pop()
            if row_id == root_id:
                via = "" if start == root_id else f" (through job {start})"
                raise InvalidJob(f"depends_on: job {start} waits for the new job's family "
                                 f"root {root_id}{via}: the family cannot end before the job "
                                 f"does, a cycle")
            if row_id in seen:
                continue
            seen.add(row_id)
            row = deps.rows(conn, [row_id]).get(row_id)
            if row is None or row["status"] in FINAL and row["root_id"] is not None:
                continue
            if row["status"] == Status.WAITING:
                todo += [on for on, _ in deps.dependencies_of(conn, [row_id]).get(row_id, [])]
            if row["root_id"] is None:
                todo += deps.waiting_members(conn, row_id)


# What is known of a dependency: `(finished, ok, word)`; `word` ends the error text of a
# row it cancels (`dependency 12 failed`).
State = tuple[bool, bool, str]
_OPEN: State = (False, False, "")


def _state(conn: Connection, dep_id: int, row: dict | None, known: dict[int, State]) -> State:
    """What is known of dependency `dep_id` (`row`: its row, None when missing): a row
    finished in this transaction is in `known` (a deleted one too); a missing row has
    finished (deleted after its end: had it failed, the delete's own finish decided
    then); a root with children has finished once its family completed (ok: the family's
    outcome is `success`)."""
    if dep_id in known:
        return known[dep_id]
    if row is None:
        return True, True, "deleted"
    if row["status"] not in FINAL:
        return _OPEN
    if row["root_id"] is None and deps.has_members(conn, dep_id):
        outcome = deps.family_outcome(conn, dep_id)
        if outcome is None or deps.family_live(conn, dep_id):
            return _OPEN
        return _family_state(outcome)
    return True, row["status"] == Status.COMPLETED, str(row["status"])


def _family_state(outcome: str) -> State:
    word = "failed" if outcome == "failure" else f"ended {outcome}"
    return True, outcome == _SUCCESS, f"{word} (its family)"


def _decide(conn: Connection, dependents: Iterable[int], now: datetime,
            known: dict[int, State]) -> tuple[Settled, dict[int, State]]:
    """Lock the `waiting` rows of `dependents` (ascending ids), read their dependencies
    (plain reads, after the lock) and release or cancel each that is decided. Returns
    what was done and `known` for the rows cancelled (finished, not ok)."""
    settled = Settled()
    waiting = deps.lock_waiting(conn, dependents)
    if not waiting:
        return settled, {}
    of = deps.dependencies_of(conn, [r["id"] for r in waiting])
    rows = deps.rows(conn, {on for pairs in of.values() for on, _ in pairs})
    release, cancel = [], []
    for row in waiting:
        pairs = of.get(row["id"], [])
        states = {on: _state(conn, on, rows.get(on), known) for on, _ in pairs}
        bad = [on for on, allow in pairs if states[on][0] and not states[on][1] and not allow]
        if bad:
            row["error"] = f"dependency {bad[0]} {states[bad[0]][2]}"
            cancel.append(row)
        elif all(done for done, _, _ in states.values()):
            row["after"] = [on for on, _ in pairs]
            release.append(row)
    deps.release(conn, release, now)
    deps.cancel(conn, cancel, now)
    settled.released += [(r["id"], r["queue"]) for r in release]
    cancelled_rows = deps.rows(conn, [r["id"] for r in cancel])
    settled.cancelled += [(r["id"], cancelled_rows[r["id"]]["root_id"]) for r in cancel]
    settled.ended += [{"id": r["id"], "type": r["type"], "callback_url": r["callback_url"],
                       "attempts": r["attempts"], "max_attempts": r["max_attempts"],
                       "error": r["error"][:1000], "outcome_reason": Reason.DEPENDENCY_FAILED,
                       "status": Status.CANCELLED} for r in cancel]
    return settled, {r["id"]: (True, False, "cancelled") for r in cancel}


def after_finish(conn: Connection, finished: Sequence[tuple[int, str]], now: datetime, *,
                 roots: Iterable[int] = (), pairs: list[tuple[int, int]] | None = None,
                 parents: set[int] | None = None) -> Settled:
    """Release or cancel the rows waiting for rows finished in the caller's transaction.

    One indexed read when no row depends on them (the hot path). A finished row that is a
    family root with children is skipped: its dependents wait for the family's
    completion (`release_after_family`).

    Args:
        finished: `(id, final status)` of the rows finished (`completed`, `failed`,
            `cancelled`, `expired` or `deleted`; other statuses are ignored).
        now: naive UTC.
        roots: of `finished`, the ids known to be parentless (the others are not checked
            for children); default: none known, every one with dependents is checked.
        pairs: the dependency pairs of `finished` when the caller read them already
            (`store.families.links`); None: read here.
        parents: of `roots`, those known to have children (read with `pairs`); None:
            asked here for the roots that have dependents.

    Returns:
        A `Settled`: the rows to ring after the commit, and the rows cancelled.
    """
    done = {int(i): s for i, s in finished if s in FINAL or s == Ended.DELETED}
    if not done:
        return Settled()
    if pairs is None:
        pairs = deps.dependents_of(conn, done)
    if not pairs:
        return Settled()
    roots = set(roots)
    triggers = {on for _, on in pairs}
    if parents is not None:
        skipped = {on for on in triggers if on in parents}
    else:
        skipped = {on for on in triggers
                   if (not roots or on in roots) and deps.has_members(conn, on)}
    known = {i: (True, s == Status.COMPLETED, str(s)) for i, s in done.items()
             if i not in skipped}
    dependents = {j for j, on in pairs if on not in skipped}
    return _cascade(conn, dependents, now, known)


def _cascade(conn: Connection, dependents: set[int], now: datetime,
             known: dict[int, State]) -> Settled:
    """`_decide` the dependents, then the dependents of the rows it cancelled, level by
    level (at most `MAX_CASCADE` levels; deeper ones are left to `release_ready`)."""
    settled = Settled()
    for _ in range(MAX_CASCADE):
        if not dependents:
            break
        step, cancelled = _decide(conn, dependents, now, known)
        settled.add(step)
        if not cancelled:
            break
        known = {**known, **cancelled}
        dependents = {j for j, _ in deps.dependents_of(conn, cancelled)}
    return settled


def settle_family_dependents(conn: Connection, root_id: int, now: datetime,
                             outcome: str | None = None) -> Settled:
    """`release_after_family`, with the rows cancelled too (`Settled`)."""
    pairs = deps.dependents_of(conn, [root_id])
    if not pairs:
        return Settled()
    if outcome is None:
        outcome = deps.family_outcome(conn, root_id) or _outcome_from_rows(conn, root_id)
    known = {root_id: _family_state(outcome)}
    return _cascade(conn, {j for j, _ in pairs}, now, known)


def release_after_family(conn: Connection, root_id: int, now: datetime,
                         outcome: str | None = None) -> list[tuple[int, str]]:
    """The family of `root_id` has completed (called in the transaction that completes
    it, by `cronjobs.family.settle`, after it wrote the `cronjob_family` row): release
    the rows waiting for that root whose dependencies are now all finished, and cancel
    them when the family did not succeed (unless `allow_failed`).

    Args:
        root_id: the family's root row.
        now: naive UTC.
        outcome: the family's outcome (`success`, `failure`, `cancelled`); None: the
            latest `cronjob_family` row's, else `success` when every row of the family
            completed.

    Returns:
        `(id, queue)` of the rows made `pending`, to ring after the commit.
    """
    return settle_family_dependents(conn, root_id, now, outcome).released


def _outcome_from_rows(conn: Connection, root_id: int) -> str:
    root = deps.rows(conn, [root_id]).get(root_id)
    statuses = deps.family_statuses(conn, root_id) | {root["status"] if root else "completed"}
    return _SUCCESS if statuses <= {Status.COMPLETED} else "failure"


def release_ready(conn: Connection, now: datetime, limit: int = 100) -> Settled:
    """The safety net (the worker's sweep): release or cancel the oldest `waiting` rows (at
    most `limit` looked at) whose dependencies have all finished — a decision the
    finishing transactions missed (a cascade deeper than `MAX_CASCADE`, a row whose
    dependency's family completed while it was being dispatched). Plain reads first; only
    the rows found ready are locked. One indexed read when no row waits."""
    ids = deps.waiting_rows(conn, limit)
    if not ids:
        return Settled()
    still = waiting_for(conn, ids)
    return _cascade(conn, {i for i in ids if i not in still}, now, {})


def waiting_for(conn: Connection, job_ids: Iterable[int]) -> dict[int, list[int]]:
    """`{job_id: [unfinished dependency ids]}` of `job_ids` (the ones they still wait
    for: "waiting for 12, 15"); a row waiting for nothing is absent."""
    of = deps.dependencies_of(conn, job_ids)
    rows = deps.rows(conn, {on for pairs in of.values() for on, _ in pairs})
    out: dict[int, list[int]] = {}
    for job_id, pairs in of.items():
        left = [on for on, _ in pairs if not _state(conn, on, rows.get(on), {})[0]]
        if left:
            out[job_id] = left
    return out
