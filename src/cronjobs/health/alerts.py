"""Alerts: compare a health report with the open problems in `cronjob_alert`, and notify.

Rules: a new problem is alerted at once; a problem still open is alerted again at most
once per `alert_repeat_minutes` (60), or at once when it gets worse (warn -> fail); a
problem that clears gets one recovery message (if it had been alerted). The decision is
written before sending (under row locks, so two health runs never both send); when every
channel fails, the sent mark is taken back so the next run tries again.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from datetime import timedelta

from .. import store
from ..app import App
from ..db import run_in_transaction
from .notifiers import notifiers
from .report import STATUSES, HealthReport

log = logging.getLogger("cronjobs.alerts")


@dataclass
class AlertRun:
    """What one alert pass did.

    Attributes:
        problems: problems alerted now (new, worse, or due for a reminder): dicts with
            key, status, message.
        recovered: problems that cleared and were alerted before.
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
    """Update the open problems from `report` and send what is due.

    Returns:
        An `AlertRun`.
    """
    now = report.at
    repeat = timedelta(minutes=app.settings.alert_repeat_minutes)
    current = {p.key: p for p in report.problems}
    run = AlertRun()

    def decide(conn) -> None:  # noqa: ANN001
        run.problems.clear()
        run.recovered.clear()
        known = store.alerts.open_problems(conn)
        for key, problem in current.items():
            row = known.get(key)
            entry = {"key": key, "status": problem.status, "message": problem.message}
            if row is None:
                store.alerts.open_problem(conn, key, problem.status, problem.message, now)
                due = True
            else:
                worse = STATUSES.index(problem.status) > STATUSES.index(row["status"])
                due = worse or row["last_sent_at"] is None or now - row["last_sent_at"] >= repeat
            if due:
                run.problems.append(entry)
            store.alerts.touch_problem(conn, key, problem.status, problem.message, now, sent=due)
        for key, row in known.items():
            if key not in current:
                store.alerts.close_problem(conn, key)
                if row["last_sent_at"] is not None:
                    run.recovered.append({"key": key, "status": "ok", "message": row["message"]})

    run_in_transaction(app.engine, decide)
    if not (run.problems or run.recovered):
        return run
    channels = notifiers(app.settings)
    alert = _message(report, run)
    for channel in channels:
        try:
            channel.send(alert)
            run.delivered.append(channel.name)
        except Exception as exc:
            run.failed[channel.name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            log.warning("alert via %s failed: %s", channel.name, run.failed[channel.name])
    if channels and not run.delivered and run.problems:
        keys = [p["key"] for p in run.problems]
        run_in_transaction(app.engine, lambda c: store.alerts.unsend(c, keys))
    return run


def _message(report: HealthReport, run: AlertRun) -> dict:
    host = socket.gethostname()
    lines = [f"{p['status'].upper()}: {p['message']}" for p in run.problems]
    lines += [f"RECOVERED: {p['message']}" for p in run.recovered]
    if run.problems:
        subject = (f"[cronjobs {host}] {report.status.upper()}: {len(run.problems)} problem(s)"
                   + (f", {len(run.recovered)} recovered" if run.recovered else ""))
    else:
        subject = f"[cronjobs {host}] recovered: {len(run.recovered)} problem(s)"
    event = "problem" if run.problems else "recovered"
    return {"event": event, "status": report.status, "host": host,
            "at": report.at.isoformat() + "Z", "problems": run.problems,
            "recovered": run.recovered, "subject": subject,
            "text": subject + "\n" + "\n".join(lines)}
