"""The state of one health problem across health runs, and what it is owed: pure functions.

A problem (a key such as `workers:emails`) is *failing* in a health run that reports it,
and *passing* in a run whose check answered without it. Its row in `cronjob_alert` keeps
the current state, how many runs in a row it has held (`runs`), since when
(`state_since`), the times of its state changes within the flap window (`changes`), when
the episode began (`first_seen_at`), and whether an alert was delivered (`alerted_at`,
`last_sent_at`). The rules, with `Policy` from the settings:

- **alert** (`problem`): failing in `fail_after` runs in a row (`CRONJOBS_ALERT_AFTER_RUNS`,
  2), so a one-run blip sends nothing;
- **flapping**: its state changed at least `flap_changes` times (3; the first failure
  counts) within the last `flap_window` (60 min), e.g. failing, passing, failing again
  within an hour. A flapping problem not yet alerted is sent once as `flapping` (in any
  state); while it flaps, no recovery is sent and reminders come at most once per
  `repeat`. It stops flapping when fewer than `flap_changes` changes remain in the window;
- **reminder**: an alerted problem still failing (or flapping) is sent again once
  `repeat` (60 min) has passed since the last message; one that gets worse (warn -> fail)
  at once (`problem`);
- **recovery** (`recovered`): an alerted problem that is not flapping and has passed
  `recover_after` runs in a row (`CRONJOBS_ALERT_RECOVER_AFTER_RUNS`, 2). Not alerted,
  nothing is sent.

A row stays while its recent changes matter for flapping, and is deleted once it passes,
is not alerted, has no message in flight and no change within the window (`quiet`).
Table-tested in tests/test_alert_rules.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..config import Settings
from .check import STATUSES, Problem

KINDS = ("problem", "flapping", "reminder", "recovered")


@dataclass(frozen=True)
class Policy:
    """The alert rules' numbers.

    Attributes:
        fail_after: failing runs in a row before the alert (>= 1).
        recover_after: passing runs in a row before the recovery (>= 1).
        flap_changes: state changes within `flap_window` that make a problem flapping.
        flap_window: how far back state changes are counted.
        repeat: the shortest gap between two messages about an open problem.
    """

    fail_after: int = 2
    recover_after: int = 2
    flap_changes: int = 3
    flap_window: timedelta = timedelta(minutes=60)
    repeat: timedelta = timedelta(minutes=60)

    @classmethod
    def from_settings(cls, s: Settings) -> Policy:
        """The policy of `CRONJOBS_ALERT_*` settings."""
        return cls(s.alerts.after_runs, s.alerts.recover_after_runs, s.alerts.flap_changes,
                   timedelta(minutes=s.alerts.flap_window_minutes),
                   timedelta(minutes=s.alerts.repeat_minutes))


def new_row(problem: Problem, check_name: str | None, now: datetime) -> dict:
    """The row of a problem seen for the first time, before `observe` counts the run:
    passing, no runs, nothing sent (`observe` then records the change to failing)."""
    return {"problem": problem.key, "check_name": check_name, "status": problem.status,
            "message": problem.message, "state": "pass", "runs": 0, "state_since": now,
            "changes": [], "first_seen_at": now, "last_seen_at": now, "alerted_at": None,
            "last_sent_at": None, "sending_until": None}


def observe(row: dict, problem: Problem | None, now: datetime, policy: Policy) -> dict:
    """Count one health run: failing (`problem` given) or passing (None).

    Args:
        row: the problem's row (see `new_row` for its keys; times naive UTC).
        problem: what the run reported, or None when the run passed.
        now: the run's time (naive UTC).
        policy: the rules.

    Returns:
        The updated row (a new dict; `row` is not changed).
    """
    r = dict(row)
    state = "fail" if problem is not None else "pass"
    changes = window(r["changes"], now, policy)
    if r["state"] != state:
        if state == "fail" and r["alerted_at"] is None and not changes:
            r["first_seen_at"] = now  # a new episode: nothing alerted, no recent change
        changes = changes + [now]
        r.update(state=state, runs=1, state_since=now)
    else:
        r["runs"] += 1
    r["changes"] = changes
    if problem is not None:
        r.update(status=problem.status, message=problem.message, last_seen_at=now)
    return r


def window(changes: list[datetime], now: datetime, policy: Policy) -> list[datetime]:
    """The state changes within the flap window that ends at `now`."""
    return [c for c in changes if c > now - policy.flap_window]


def flapping(row: dict, now: datetime, policy: Policy) -> bool:
    """True when the row changed state at least `flap_changes` times within the window."""
    return len(window(row["changes"], now, policy)) >= policy.flap_changes


def in_flight(row: dict, now: datetime) -> bool:
    """True while another alert pass is sending a message about this row."""
    return row["sending_until"] is not None and row["sending_until"] > now


def owed(before: dict, after: dict, now: datetime, policy: Policy) -> str | None:
    """What message the row is owed after this run: one of `KINDS`, or None.

    Args:
        before: the row as it was (a new problem: `new_row`).
        after: the row after `observe` (or unchanged when the run could not tell).
        now: the run's time (naive UTC).
        policy: the rules.
    """
    if in_flight(after, now):
        return None
    alerted = after["alerted_at"] is not None
    due = after["last_sent_at"] is None or now - after["last_sent_at"] >= policy.repeat
    if flapping(after, now, policy):
        return "reminder" if alerted and due else None if alerted else "flapping"
    if after["state"] == "pass":
        return "recovered" if alerted and after["runs"] >= policy.recover_after else None
    if not alerted:
        return "problem" if after["runs"] >= policy.fail_after else None
    worse = before["state"] == "fail" and rank(after["status"]) > rank(before["status"])
    return "problem" if worse else "reminder" if due else None


def quiet(row: dict, now: datetime, policy: Policy) -> bool:
    """True when the row can be deleted: passing, not alerted, nothing in flight, no
    state change within the flap window."""
    return (row["state"] == "pass" and row["alerted_at"] is None and not in_flight(row, now)
            and not window(row["changes"], now, policy))


def rank(status: str) -> int:
    """Order of badness: ok < warn < fail < anything else (a check that broke)."""
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)
