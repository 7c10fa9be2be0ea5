"""The words of an alert: one line per problem saying since when and for how long.

    FAIL: queue 'emails' has 3 due row(s) and no live worker (failing since 14:03 UTC, for 10 min)
    FLAPPING (FAIL): ... (failing on and off since 14:03 UTC, for 25 min: 4 state changes in 60 min)
    STILL FAIL: ... (failing since 14:03 UTC, for 1 h 10 min)
    RECOVERED: ... (was failing since 14:03 UTC, for 27 min)
"""

from __future__ import annotations

from datetime import datetime

from .alertstate import Policy, flapping, rank, window


def when(at: datetime, now: datetime) -> str:
    """`14:03 UTC` on the day of `now`, `2026-03-01 14:03 UTC` before it (naive UTC in)."""
    return at.strftime("%H:%M UTC" if at.date() == now.date() else "%Y-%m-%d %H:%M UTC")


def span(seconds: float) -> str:
    """A duration for people: `40 s`, `27 min`, `1 h 5 min`, `2 d 3 h`."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def entry(kind: str, row: dict, now: datetime, policy: Policy) -> dict:
    """One problem of a message.

    Args:
        kind: `problem`, `flapping`, `reminder` or `recovered`.
        row: the problem's row after this run (see `alertstate.new_row`).
        now: the run's time (naive UTC).
        policy: the alert rules (for the flap window).

    Returns:
        `{"key", "kind", "status", "message", "since" (ISO UTC with Z),
        "duration_seconds", "line"}`; `since`/`duration_seconds` are those of the line:
        the failing streak (problem, reminder), the episode (flapping; recovered: until
        its first passing run).
    """
    status = row["status"].upper()
    if kind == "recovered":
        since, until = row["first_seen_at"], row["state_since"]
        line = f"RECOVERED: {row['message']} (was failing since {when(since, now)}, " \
               f"for {span((until - since).total_seconds())})"
    elif kind == "flapping" or flapping(row, now, policy):
        since, until = row["first_seen_at"], now
        changes = len(window(row["changes"], now, policy))
        minutes = policy.flap_window.total_seconds() / 60
        head = "FLAPPING" if kind == "flapping" else "STILL FLAPPING"
        line = f"{head} ({status}): {row['message']} (failing on and off since " \
               f"{when(since, now)}, for {span((until - since).total_seconds())}: " \
               f"{changes} state changes in {minutes:g} min)"
    else:
        since, until = row["state_since"], now
        head = status if kind == "problem" else f"STILL {status}"
        line = f"{head}: {row['message']} (failing since {when(since, now)}, " \
               f"for {span((until - since).total_seconds())})"
    return {"key": row["problem"], "kind": kind,
            "status": "ok" if kind == "recovered" else row["status"],
            "message": row["message"], "since": since.isoformat() + "Z",
            "duration_seconds": round((until - since).total_seconds()), "line": line}


def message(entries: list[dict], now: datetime, host: str) -> dict:
    """The alert every channel sends (the webhook posts it as JSON).

    Returns:
        `{"event": "problem"|"recovered", "status", "host", "at", "problems": [entry],
        "recovered": [entry], "subject", "text"}`; `status` is the worst of the problems'.
    """
    problems = [e for e in entries if e["kind"] != "recovered"]
    recovered = [e for e in entries if e["kind"] == "recovered"]
    status = max((e["status"] for e in problems), key=rank, default="ok")
    if problems:
        subject = (f"[cronjobs {host}] {status.upper()}: {len(problems)} problem(s)"
                   + (f", {len(recovered)} recovered" if recovered else ""))
    else:
        subject = f"[cronjobs {host}] recovered: {len(recovered)} problem(s)"
    return {"event": "problem" if problems else "recovered", "status": status, "host": host,
            "at": now.isoformat() + "Z", "problems": problems, "recovered": recovered,
            "subject": subject, "text": "\n".join([subject] + [e["line"] for e in entries])}


def amount(seconds: float) -> str:
    """A duration someone configured, in the largest unit that divides it exactly: `26 h`,
    `7 d`, `90 min`, `45 s` (fractions of a second rounded)."""
    whole = max(0, round(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if whole and whole % size == 0:
            return f"{whole // size} {unit}"
    return f"{whole} s"


def not_succeeded(task: str, within_seconds: float) -> str:
    """`task db-backup has not succeeded in 26 h` (EXPECT's `success_within`, seconds)."""
    return f"task {task} has not succeeded in {amount(within_seconds)}"


def failed_in_a_row(task: str, failures: int, paused: bool) -> str:
    """`task X failed 3 times in a row; paused` (AUTO_PAUSE_AFTER_FAILURES)."""
    return f"task {task} failed {failures} times in a row" + ("; paused" if paused else "")


def ran_outside(task: str, seconds: float, least: float | None, most: float | None) -> str:
    """`task X ran 2 s, expected at least 30 s` (below `least`, seconds) or `task X ran
    25 min, expected at most 20 min` (above `most`)."""
    if least is not None and seconds < least:
        return f"task {task} ran {span(seconds)}, expected at least {amount(least)}"
    return f"task {task} ran {span(seconds)}, expected at most {amount(most or 0)}"
