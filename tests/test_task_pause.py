"""A paused scheduled task starts nothing at its slots, each recorded as skipped with the
reason `paused` (counted once, logged); a pause made with a duration ends by itself and
resume lets the next slot run; on SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import logging
from datetime import timedelta

from cronjobs import store
from cronjobs.store.db import run_in_transaction
from cronjobs.testing import drain
from test_overlap_policy import T0, AllowDiscover, at, rows, runtime, setup, started


def pause(app, minutes: float | None, now) -> None:
    until = now + timedelta(minutes=minutes) if minutes is not None else None
    run_in_transaction(app.engine, lambda conn: store.pause(
        conn, "task", "ov-allow", now=now, until=until, reason="incident", by="test"))


def test_a_paused_task_records_its_slots_as_skipped_until_resumed(make_app, caplog):
    app, clock = setup(make_app, AllowDiscover)
    assert started(at(clock, 0), "ov-allow") == ["202603020900"]
    drain(app, ["ovd", "ovx", "ovg"])
    pause(app, None, T0)
    with caplog.at_level(logging.INFO, logger="cronjobs.schedule.scheduler"):
        first = at(clock, 1)
        again = at(clock, 1.5)  # a later tick of the same slot: not counted twice
    assert started(first, "ov-allow") == [] and first.skipped["ov-allow"] == "paused"
    assert again.skipped["ov-allow"] in ("paused", "skipped")
    state = runtime(app, "ov-allow")
    assert (state["skipped_count"], state["last_skipped_slot"], state["last_skip_reason"]) \
        == (1, "202603020901", "paused")
    said = [r.getMessage() for r in caplog.records if "skipped (paused)" in r.getMessage()]
    assert len(said) == 1 and "cronjobs resume --task ov-allow" in said[0], said
    assert started(at(clock, 2), "ov-allow") == []
    assert runtime(app, "ov-allow")["skipped_count"] == 2
    assert len(rows(app, "ov.allow.discover")) == 1

    assert run_in_transaction(app.engine, lambda conn: store.resume(conn, "task", "ov-allow"))
    assert started(at(clock, 3), "ov-allow") == ["202603020903"]
    assert len(rows(app, "ov.allow.discover")) == 2


def test_a_pause_for_a_while_ends_by_itself(make_app):
    app, clock = setup(make_app, AllowDiscover)
    at(clock, 0)
    pause(app, 2, T0 + timedelta(seconds=30))  # until 09:02:30
    assert started(at(clock, 1), "ov-allow") == []
    assert started(at(clock, 2), "ov-allow") == []
    assert started(at(clock, 3), "ov-allow") == ["202603020903"]
    state = runtime(app, "ov-allow")
    assert (state["skipped_count"], state["last_skip_reason"]) == (2, "paused")
