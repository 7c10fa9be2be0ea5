"""Alerts: count each health run for every problem, and notify what is owed.

The rules (alert after N failing runs, recovery after M passing runs, flapping, hourly
reminders) are pure functions in `alertstate`; the words in `alerttext`. One pass:

1. in one transaction, lock every row of `cronjob_alert` (inserting the rows of new
   problems), count this run for each problem, and claim the rows that are owed a message
   (`sending_until`): the decision is written under the row locks before anything is
   sent, so two passes at once send one message;
2. send one message to every configured channel;
3. record the delivery: problems become alerted, recoveries end the alert. When every
   channel failed, the claim is released and the next pass sends again (a recovery too).

A problem whose check did not answer this run (it raised or passed the deadline: the
check reports a problem keyed by its own name, or a status other than ok/warn/fail) is
neither failing nor passing: the run is not counted for it.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection

from .. import limits, store
from ..app import App
from ..store.db import run_in_transaction
from . import alertstate, alerttext
from .alertstate import Policy
from .check import STATUSES, HealthReport, Problem
from .notifiers import notifiers

log = logging.getLogger("cronjobs.alerts")


@dataclass
class AlertRun:
    """What one alert pass did.

    Attributes:
        problems: problems in the message (kind `problem`, `flapping` or `reminder`):
            dicts of `alerttext.entry` (key, kind, status, message, since, duration_seconds,
            line).
        recovered: recoveries in the message (kind `recovered`).
        delivered: names of the channels that took the message.
        failed: `{channel: error}` of channels that did not.
    """

    problems: list[dict] = field(default_factory=list)
    recovered: list[dict] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def sent(self) -> bool:
        """True when there was something to say and a channel took it."""
        return bool((self.problems or self.recovered) and self.delivered)


def process(app: App, report: HealthReport) -> AlertRun:
    """Count `report` as one health run for every problem and send what is owed.

    Args:
        app: settings (`CRONJOBS_ALERT_*`), engine.
        report: this run's health report; its `at` is the run's time (naive UTC).

    Returns:
        An `AlertRun`. Channel errors are logged and returned, never raised; database
        errors are raised (`cronjobs.errors.StoreError` and subclasses).
    """
    now, policy, channels = report.at, Policy.from_settings(app.settings), notifiers(app.settings)
    claim = now + timedelta(seconds=app.settings.alerts.timeout_seconds * max(1, len(channels))
                            + 60)
    failing, answered = observations(report)
    entries = run_in_transaction(
        app.engine, lambda conn: _decide(conn, failing, answered, now, policy, claim))
    run = AlertRun([e for e in entries if e["kind"] != "recovered"],
                   [e for e in entries if e["kind"] == "recovered"])
    if not entries:
        return run
    alert = alerttext.message(entries, now, socket.gethostname())
    for channel in channels:
        try:
            channel.send(alert)
            run.delivered.append(channel.name)
        except Exception as exc:
            why = str(exc)[:limits.ALERT_FAILURE_MAX_CHARS]
            run.failed[channel.name] = f"{type(exc).__name__}: {why}"
            log.warning("alert via %s failed: %s", channel.name, run.failed[channel.name])
    delivered = bool(run.delivered) or not channels
    claims = {e["key"]: e["kind"] for e in entries}
    run_in_transaction(app.engine,
                       lambda conn: store.alerts.settle(conn, claims, claim, now, delivered))
    return run


def observations(report: HealthReport) -> tuple[dict[str, tuple[Problem, str]], set[str]]:
    """What the run saw.

    Returns:
        `({problem key: (problem, check name)}, {names of the checks that answered})`.
    """
    failing, answered = {}, set()
    for check in report.checks:
        broke = check.status not in STATUSES or any(p.key == check.name for p in check.problems)
        if not broke:  # a problem keyed by the check's own name (absent here) passes too
            answered.add(check.name)
        for problem in check.problems:
            failing[problem.key] = (problem, check.name)
    return failing, answered


def _decide(conn: Connection, failing: dict, answered: set[str], now: datetime, policy: Policy,
            claim: datetime) -> list[dict]:
    """Count the run for every row under row locks; claim the rows owed a message.

    Returns:
        The entries (`alerttext.entry`) of the claimed rows.
    """
    fresh = {k: alertstate.new_row(p, check, now) for k, (p, check) in failing.items()}
    entries = []
    for key, before in store.alerts.lock_rows(conn, fresh).items():
        after = before
        if key in failing:
            problem, check = failing[key]
            after = alertstate.observe({**before, "check_name": check}, problem, now, policy)
        elif before["check_name"] is None or before["check_name"] in answered:
            after = alertstate.observe(before, None, now, policy)
        kind = alertstate.owed(before, after, now, policy)
        if kind is not None:
            after = {**after, "sending_until": claim}
            entries.append(alerttext.entry(kind, after, now, policy))
        if alertstate.quiet(after, now, policy):
            store.alerts.delete(conn, key)
        elif after != before:
            store.alerts.save(conn, after)
    return entries
