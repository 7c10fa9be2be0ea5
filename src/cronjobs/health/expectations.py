"""A task's own promises, judged by the `overdue` check: `EXPECT`'s `success_within`
(`overdue:<task>` fails past it) and `duration` (`too_fast:<task>` / `too_slow:<task>`,
warn), and the failed runs in a row of `AUTO_PAUSE_AFTER_FAILURES` (`failing:<task>`,
fail). Each problem's message is a per-task alert text of `alerttext`; the alerts send it
once per episode, with a recovery when it passes, as for every health problem.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection

from .. import store
from ..app import App
from ..family.view import read_families
from ..schedule.expect import Expect, auto_pause_of, expect_of
from . import alerttext
from .check import Check


def expects_of(app: App, infos: list) -> dict[str, Expect]:
    """`{task: Expect}` of the tasks among `infos` (`TaskInfo`s) that have an `EXPECT`
    (the handler's, or `[tasks.<task>] expect`, which wins)."""
    out = {}
    for info in infos:
        found = expect_of(info.handler, app.settings.task(info.task))
        if found is not None:
            out[info.task] = found
    return out


def success_within(check: Check, task: str, expect: Expect | None, age: float) -> bool:
    """Judge `task` by its `success_within` (seconds) when it has one: `overdue:<task>`
    fails once `age` (seconds since its last success, or its first run) passes it.

    Returns:
        True when the task has a `success_within` (the 2x/5x rule then does not apply).
    """
    if expect is None or expect.success_within is None:
        return False
    if age > expect.success_within:
        check.problem(f"overdue:{task}", "fail",
                      alerttext.not_succeeded(task, expect.success_within))
    return True


def durations(conn: Connection, infos: list, expects: dict[str, Expect], check: Check) -> None:
    """`too_fast:<task>` / `too_slow:<task>` (warn) for each task whose last ended run
    (its family's duration, from the root's start to the family's completion) lies
    outside its `EXPECT` duration range. A run still going is not judged: the last ended
    one is, so the problem stays until a later run ends inside the range."""
    for info in infos:
        expect = expects.get(info.task)
        if expect is None or (expect.min_seconds is None and expect.max_seconds is None):
            continue
        root = store.views.last_completed_root(conn, info.type)
        fam = read_families(conn, [root]).get(root) if root is not None else None
        took = fam.duration_seconds if fam is not None else None
        if took is None:
            continue
        text = alerttext.ran_outside(info.task, took, expect.min_seconds, expect.max_seconds)
        if expect.min_seconds is not None and took < expect.min_seconds:
            check.problem(f"too_fast:{info.task}", "warn", text)
        elif expect.max_seconds is not None and took > expect.max_seconds:
            check.problem(f"too_slow:{info.task}", "warn", text)


def failing(app: App, conn: Connection, infos: list, now: datetime, check: Check) -> None:
    """`failing:<task>` (fail) for each task with an `AUTO_PAUSE_AFTER_FAILURES` whose
    scheduled runs failed that many times in a row (`cronjob_runtime.failure_streak`);
    it passes once a run succeeds or `cronjobs resume --task` clears the count."""
    for info in infos:
        limit = auto_pause_of(info.handler, app.settings.task(info.task))
        streak = int(info.runtime.get("failure_streak") or 0)
        if limit is None or streak < limit:
            continue
        paused = store.flow.is_task_paused(conn, info.task, now)
        check.problem(f"failing:{info.task}", "fail",
                      alerttext.failed_in_a_row(info.task, streak, paused))
