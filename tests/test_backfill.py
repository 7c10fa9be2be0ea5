"""`cronjobs backfill TASK --from --to`: one row per slot of the range, made as the
scheduler makes them and claimed so it never starts them again; idempotent; chained one
after the other unless OVERLAP allow; the schedule's state never moved; bad ranges and
tasks refused in one line."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from cronjobs import CronJobHandler
from cronjobs.cli import main
from cronjobs.clock import FrozenClock
from cronjobs.errors import BackfillRefused, HandlerNotFound
from cronjobs.schedule.backfill import backfill
from cronjobs.schedule.scheduler import tick
from cronjobs.store.models import cronjob_queue, cronjob_runtime, cronjob_slot
from cronjobs.testing import drain

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
NOW = datetime(2026, 3, 10, 9, 30)
WEEK = (datetime(2026, 3, 2), datetime(2026, 3, 8))  # 7 daily slots, both ends inclusive


class Daily(CronJobHandler):
    TYPE = "bf.day.discover"
    FREQUENCY = "day"
    QUEUE = "bf"

    def handle(self, payload, job):
        return True


class DailyAllow(Daily):
    TYPE = "bf.free.discover"
    OVERLAP = "allow"


class NoSchedule(CronJobHandler):
    TYPE = "bf.manual.discover"

    def handle(self, payload, job):
        return True


def setup(make_app):
    app = make_app(clock=FrozenClock(NOW), handler_paths=())
    for cls in (Daily, DailyAllow, NoSchedule):
        app.handlers.register(cls.TYPE, cls)
    return app


def rows(app, job_type: str = Daily.TYPE) -> list[dict]:
    with app.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            sa.select(cronjob_queue.c.id, cronjob_queue.c.idempotency_key,
                      cronjob_queue.c.status, cronjob_queue.c.payload)
            .where(cronjob_queue.c.type == job_type).order_by(cronjob_queue.c.id)).mappings()]


def test_seven_days_make_seven_rows_once_chained_and_the_schedule_stays(make_app):
    app = setup(make_app)
    assert [t for t, _, _ in tick(NOW, app=app).started if t == "bf-day"] == ["bf-day"]
    with app.engine.connect() as conn:
        before = dict(conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == "bf-day")).mappings().one())
    first = backfill("bf-day", *WEEK, app=app)
    keys = [f"202603{d:02d}" for d in range(2, 9)]
    assert [b.key for b in first] == keys and all(b.created for b in first)
    made = rows(app)[1:]
    assert [b.job_id for b in first] == [r["id"] for r in made]
    assert [r["idempotency_key"] for r in made] == [f"cronjobs:bf-day:{k}" for k in keys]
    assert [r["payload"] for r in made] == [f'{{"slot": "{k}"}}' for k in keys]
    assert [r["status"] for r in made] == ["waiting"] * 7  # behind the 10th's run, in turn
    again = backfill("bf-day", *WEEK, app=app)
    assert [b.job_id for b in again] == [b.job_id for b in first]
    assert not any(b.created for b in again) and len(rows(app)) == 8
    with app.engine.connect() as conn:
        after = dict(conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == "bf-day")).mappings().one())
        claimed = dict(conn.execute(sa.select(cronjob_slot.c.slot, cronjob_slot.c.job_id).where(
            cronjob_slot.c.task == "bf-day")).all())
    assert before == after  # last_slot, last_job_id, next_run_at: untouched
    assert all(claimed[b.key] == b.job_id for b in first)
    drain(app, ["bf"])  # released one after the other
    assert [r["status"] for r in rows(app)] == ["completed"] * 8


def test_the_scheduler_never_starts_a_backfilled_slot_and_allow_does_not_chain(make_app):
    app = setup(make_app)
    made = backfill("bf-free", datetime(2026, 3, 9), NOW, app=app)
    assert [b.key for b in made] == ["20260309", "20260310"]
    assert [r["status"] for r in rows(app, DailyAllow.TYPE)] == ["pending", "pending"]
    report = tick(NOW, app=app)
    assert [t for t, _, _ in report.started if t == "bf-free"] == []
    assert report.skipped["bf-free"] == "lost-race" and len(rows(app, DailyAllow.TYPE)) == 2


def test_aware_times_and_the_dry_run(make_app):
    app = setup(make_app)
    istanbul = datetime(2026, 3, 2, 5, 0, tzinfo=timezone(timedelta(hours=3)))  # 02:00 UTC
    dry = backfill("bf-day", istanbul, datetime(2026, 3, 3, 0, 0), dry_run=True, app=app)
    assert [(b.key, b.at, b.job_id) for b in dry] == [("20260303", datetime(2026, 3, 3), None)]
    assert rows(app) == []


def test_the_command_prints_ids_and_refuses_bad_input_in_one_line(make_app):
    app = setup(make_app)
    args = ["backfill", "bf-day", "--from", "2026-03-02", "--to", "2026-03-08T00:00"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    ids = [int(line) for line in first.output.split()]
    assert ids == [r["id"] for r in rows(app)] and len(ids) == 7
    again = CliRunner().invoke(main, args)
    assert [int(line) for line in again.output.split()] == ids and len(rows(app)) == 7
    dry = CliRunner().invoke(main, [*args[:4], "--to", "2026-03-09", "--dry-run"])
    assert dry.output.splitlines()[-1] == "cronjobs:bf-day:20260309 2026-03-09 00:00 UTC"
    assert len(rows(app)) == 7
    for bad, words in [
        (["bf-dy"], "unknown task 'bf-dy' (did you mean bf-day?)"),
        (["bf-manual"], "task bf-manual has no frequency"),
        (["bf-day", "--to", "2026-03-01"], "--to 2026-03-01 00:00:00 is before --from"),
        (["bf-day", "--from", "1990-01-01"], "holds more than 10,000 slots"),
    ]:
        argv = ["backfill", bad[0], "--from", "2026-03-02", "--to", "2026-03-08", *bad[1:]]
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 2 and words in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    with pytest.raises(BackfillRefused, match="is before --from"):
        backfill("bf-day", datetime(2026, 3, 2), datetime(2026, 3, 1), app=app)
    with pytest.raises(HandlerNotFound, match="did you mean bf-day"):
        backfill("bf-dy", *WEEK, app=app)

