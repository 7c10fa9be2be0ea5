"""The alert rules as a table: which health runs of a problem send an alert, a flapping
notice, a reminder or a recovery (N failing runs, M passing runs, flapping, hourly
reminders), and the since/for words of each message."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cronjobs.health.alertstate import Policy, flapping, new_row, observe, owed, quiet
from cronjobs.health.alerttext import entry, span, when
from cronjobs.health.check import Problem

T0 = datetime(2026, 3, 1, 14, 3)
DEFAULT_POLICY = Policy()


def simulate(runs: str, policy: Policy = DEFAULT_POLICY, every: timedelta = timedelta(minutes=5),
             status: str = "fail") -> list[tuple[int, str]]:
    """Feed runs (`F` failing, `W` failing with warn, `P` passing, `?` the check did not
    answer), one every `every`; every message is delivered. Returns `[(run index, kind)]`."""
    row, sent = None, []
    for i, seen in enumerate(runs):
        now = T0 + i * every
        problem = Problem("disk", "warn" if seen == "W" else status, "disk 95 % used") \
            if seen in "FW" else None
        if row is None:
            if problem is None:
                continue
            row = new_row(problem, "resources", now)
        before = row
        after = row if seen == "?" else observe(row, problem, now, policy)
        kind = owed(before, after, now, policy)
        if kind == "recovered":
            after = {**after, "alerted_at": None, "last_sent_at": None}
        elif kind:
            after = {**after, "alerted_at": after["alerted_at"] or now, "last_sent_at": now}
        if kind:
            sent.append((i, kind))
        row = None if quiet(after, now, policy) else after
    return sent


@pytest.mark.parametrize("runs, policy, expected", [
    ("FPPPP", Policy(), []),                                     # a one-run blip: nothing
    ("FFFFF", Policy(), [(1, "problem")]),                       # two failing runs: one alert
    ("FFFFF", Policy(fail_after=1), [(0, "problem")]),
    ("FFFFF", Policy(fail_after=3), [(2, "problem")]),
    ("FFPPPP", Policy(), [(1, "problem"), (3, "recovered")]),    # recovery after 2 passes
    ("FFPPPP", Policy(recover_after=3), [(1, "problem"), (4, "recovered")]),
    ("FFPFPPP", Policy(), [(1, "problem")]),                     # came back: flapping, no recovery
    ("F?F", Policy(), [(2, "problem")]),                         # a check that did not answer
    ("F?P?P", Policy(), []),                                     # ... counts for nothing
    ("FFP?P", Policy(), [(1, "problem"), (4, "recovered")]),
    ("WWFF", Policy(), [(1, "problem"), (2, "problem")]),        # warn -> fail: at once
    ("FF" + "F" * 12 + "F" * 12, Policy(), [(1, "problem"), (13, "reminder"), (25, "reminder")]),
    ("FPPFFPPFFPPFFPP", Policy(), [(3, "flapping")]),            # 40 s/40 s sampled every 5 min
])
def test_which_runs_send_what(runs, policy, expected):
    assert simulate(runs, policy) == expected


def test_flapping_every_40_seconds_for_three_hours_sends_one_notice_and_hourly_reminders():
    runs = "FP" * (3 * 60 * 60 // 80)  # one run every 40 s, down 40 s, up 40 s
    sent = simulate(runs, every=timedelta(seconds=40))
    assert [kind for _, kind in sent] == ["flapping", "reminder", "reminder"]
    times = [i * 40 for i, _ in sent]
    assert times[0] == 80 and all(b - a >= 3600 for a, b in zip(times, times[1:], strict=False))


def test_a_flapping_problem_recovers_once_its_changes_leave_the_window():
    runs = "FP" * 20 + "P" * 150  # 40 s runs: flaps for 26 min, then passes
    sent = simulate(runs, every=timedelta(seconds=40))
    # still flapping an hour after the notice (changes in the last 60 min): one reminder
    assert [kind for _, kind in sent] == ["flapping", "reminder", "recovered"]
    assert sent[1][0] * 40 == 80 + 3600
    # recovered once fewer than 3 changes are left in the last 60 min: the third-last
    # change (run 37) left the window
    assert sent[2][0] * 40 == 37 * 40 + 3600


def test_a_row_is_dropped_once_it_passes_quietly_for_the_window():
    policy = Policy()
    row = observe(new_row(Problem("disk", "fail", "x"), "resources", T0),
                  Problem("disk", "fail", "x"), T0, policy)
    row = observe(row, None, T0 + timedelta(minutes=5), policy)
    assert not quiet(row, T0 + timedelta(minutes=5), policy)       # its changes may still flap
    assert quiet(row, T0 + timedelta(minutes=66), policy)
    assert not flapping(row, T0 + timedelta(minutes=5), policy)


def test_a_row_being_sent_is_owed_nothing_more():
    policy = Policy(fail_after=1)
    row = new_row(Problem("disk", "fail", "x"), "resources", T0)
    after = observe(row, Problem("disk", "fail", "x"), T0, policy)
    assert owed(row, after, T0, policy) == "problem"
    claimed = {**after, "sending_until": T0 + timedelta(seconds=70)}
    assert owed(claimed, claimed, T0 + timedelta(seconds=1), policy) is None
    assert owed(claimed, claimed, T0 + timedelta(seconds=71), policy) == "problem"  # lease over


def test_messages_say_since_when_and_for_how_long():
    policy = Policy()
    failing = {**new_row(Problem("disk", "fail", "disk 95 % used"), "resources", T0),
               "state": "fail", "runs": 7, "state_since": T0}
    now = T0 + timedelta(minutes=27)
    assert entry("problem", failing, now, policy)["line"] == \
        "FAIL: disk 95 % used (failing since 14:03 UTC, for 27 min)"
    later = T0 + timedelta(hours=1, minutes=5)
    assert entry("reminder", failing, later, policy)["line"] == \
        "STILL FAIL: disk 95 % used (failing since 14:03 UTC, for 1 h 5 min)"
    recovered = {**failing, "state": "pass", "runs": 2, "state_since": now}
    line = entry("recovered", recovered, now + timedelta(minutes=5), policy)
    assert line["line"] == "RECOVERED: disk 95 % used (was failing since 14:03 UTC, for 27 min)"
    assert line["since"] == "2026-03-01T14:03:00Z" and line["duration_seconds"] == 27 * 60
    assert when(T0, T0 + timedelta(days=1)) == "2026-03-01 14:03 UTC"
    assert [span(s) for s in (40, 60, 3599, 3600 + 300, 2 * 86400 + 3 * 3600)] == \
        ["40 s", "1 min", "59 min", "1 h 5 min", "2 d 3 h"]
