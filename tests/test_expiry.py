"""Deadlines and expiry (SQLite, in-process, a frozen clock): a row dispatched with
`expires_at`/`expires_in` is never claimed after its deadline and ends `expired` (no
attempt used, `handle()` never called, dependents cancelled as after a failure); a
task's STARTING_DEADLINE gives its slot rows their deadline and an expired slot row
counts as a skip (`expired`); bad expiries are one-line errors."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from cronjobs import CronJobHandler, queue
from cronjobs.clock import FrozenClock
from cronjobs.errors import HandlerError, InvalidJob, JobStateError
from cronjobs.job.expiry import expire
from cronjobs.schedule.scheduler import tick
from cronjobs.status import Reason, Status
from cronjobs.store.models import cronjob_runtime
from cronjobs.testing import drain

T0 = datetime(2027, 3, 2, 9, 0, 5)
RAN: list[int] = []


class Deadline(CronJobHandler):
    """Every minute; a slot's run may start up to 60 s after its slot."""

    TYPE = "dl.report.discover"
    FREQUENCY = "minute"
    STARTING_DEADLINE = 60
    QUEUE = "dlq"

    def handle(self, payload, job):
        RAN.append(job.id)
        return True


class Plain(CronJobHandler):
    TYPE = "dl.plain.execute"
    QUEUE = "dlq"

    def handle(self, payload, job):
        RAN.append(job.id)
        return True


class Parent(CronJobHandler):
    """Dispatches one child due in an hour that may start within 10 minutes of it."""

    TYPE = "dl.parent.discover"
    QUEUE = "dlp"

    def handle(self, payload, job):
        RAN.append(self.dispatch(Plain.TYPE, {}, scheduled_at=T0 + timedelta(hours=1),
                                 expires_in="10m"))
        return True


@pytest.fixture
def app(make_app):
    RAN.clear()
    clock = FrozenClock(T0)
    app = make_app(clock=clock, handler_paths=())
    for cls in (Deadline, Plain, Parent):
        app.handlers.register(cls.TYPE, cls)
    return app


def later(app, seconds: float) -> None:
    app.clock.set(app.clock.now() + timedelta(seconds=seconds))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_row_not_started_by_its_deadline_expires_without_an_attempt(app):
    soon = queue.dispatch(Plain.TYPE, expires_in="30s", app=app)
    waits = queue.dispatch(Plain.TYPE, depends_on=[soon], app=app)
    kept = queue.dispatch(Plain.TYPE, expires_in=120, app=app)
    assert queue.get(soon, app=app)["expires_at"] == T0 + timedelta(seconds=30)
    later(app, 31)
    report = drain(app)
    assert RAN == [kept]  # the expired row was never claimed
    row = queue.get(soon, app=app)
    assert (row["status"], row["attempts"], row["outcome_reason"]) == (
        Status.EXPIRED, 0, Reason.EXPIRED)
    assert row["finished_at"] == T0 + timedelta(seconds=31)
    assert row["error"] == "not started by its deadline 2027-03-02 09:00:35 UTC"
    assert "pending -> expired, not run" in row["process_logs"]
    dependent = queue.get(waits, app=app)  # a dependent of an expired row: as of a failed one
    assert (dependent["status"], dependent["outcome_reason"]) == (
        Status.CANCELLED, Reason.DEPENDENCY_FAILED)
    assert (report.waiting.scheduled_later, report.waiting.held) == (0, 0)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_operator_run_of_an_expired_row_claims_nothing(app):
    job_id = queue.dispatch(Plain.TYPE, expires_in=10, app=app)
    later(app, 11)
    with pytest.raises(JobStateError, match=f"job {job_id} was not started by its deadline "
                       "2027-03-02 09:00:15 UTC: it ended expired, not run"):
        queue.process(job_id, app=app)
    assert RAN == []
    assert queue.get(job_id, app=app)["status"] == Status.EXPIRED
    assert expire(app) == []
    other = queue.dispatch(Plain.TYPE, expires_in=10, app=app)
    later(app, 11)
    assert expire(app) == [other]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_expires_in_counts_from_scheduled_at_and_expires_at_is_kept(app):
    at = T0 + timedelta(hours=1)
    one = queue.dispatch(Plain.TYPE, scheduled_at=at, expires_in=timedelta(minutes=5), app=app)
    aware = datetime(2027, 3, 2, 12, 10, tzinfo=timezone(timedelta(hours=3)))
    two = queue.dispatch(Plain.TYPE, expires_at=aware, app=app)
    ids = queue.dispatch_many([{"type": Plain.TYPE, "expires_in": "2m"},
                               {"type": Plain.TYPE}], app=app)
    got = [queue.get(i, app=app)["expires_at"] for i in (one, two, *ids)]
    assert got == [at + timedelta(minutes=5), datetime(2027, 3, 2, 9, 10),
                   T0 + timedelta(minutes=2), None]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_handlers_child_takes_expires_in_from_its_scheduled_at(app):
    queue.dispatch(Parent.TYPE, app=app)
    drain(app, ["dlp"])
    child = queue.get(RAN[0], app=app)
    assert (child["parent_id"], child["expires_at"]) == (1, T0 + timedelta(hours=1, minutes=10))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("options", "words"), [
    ({"expires_in": 30, "expires_at": T0 + timedelta(minutes=1)}, "not both"),
    ({"expires_at": T0 - timedelta(seconds=1)}, "expires_at must be after the row's start"),
    ({"scheduled_at": T0 + timedelta(hours=1), "expires_at": T0 + timedelta(minutes=5)},
     "2027-03-02 10:00:05 UTC"),
    ({"expires_in": "soon"}, "expires_in must be a duration"),
    ({"expires_in": 0}, "expires_in must be a duration"),
    ({"expires_at": "tomorrow"}, "expires_at must be a datetime"),
])
def test_a_bad_expiry_is_one_line_and_writes_nothing(app, options, words):
    with pytest.raises(InvalidJob, match=words) as caught:
        queue.dispatch(Plain.TYPE, app=app, **options)
    assert "\n" not in str(caught.value)
    with pytest.raises(InvalidJob, match=words):
        queue.dispatch_many([{"type": Plain.TYPE}, {"type": Plain.TYPE, **options}], app=app)
    assert drain(app).reports == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_slot_row_past_its_starting_deadline_expires_and_counts_as_a_skip(app):
    started = [s for s in tick(app.clock.now(), app=app).started if s[0] == "dl-report"]
    assert [(task, slot) for task, slot, _ in started] == [("dl-report", "202703020900")]
    job_id = started[0][2]
    assert queue.get(job_id, app=app)["expires_at"] == datetime(2027, 3, 2, 9, 1)
    later(app, 56)  # 09:01:01, the slot's deadline passed: nothing ran meanwhile
    drain(app, ["dlq"])
    assert RAN == []
    row = queue.get(job_id, app=app)
    assert (row["status"], row["attempts"]) == (Status.EXPIRED, 0)
    with app.engine.connect() as conn:
        runtime = conn.execute(sa.select(cronjob_runtime).where(
            cronjob_runtime.c.task == "dl-report")).mappings().one()
    assert (runtime["skipped_count"], runtime["last_skipped_slot"],
            runtime["last_skip_reason"], runtime["last_status"]) == (
        1, "202703020900", "expired", Status.EXPIRED)
    assert [s for t, s, _ in tick(app.clock.now(), app=app).started
            if t == "dl-report"] == ["202703020901"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_settings_deadline_wins_and_a_bad_constant_is_refused(make_app):
    app = make_app(clock=FrozenClock(T0), handler_paths=(),
                   tasks={"dl-report": {"starting_deadline": "5m"}})
    app.handlers.register(Deadline.TYPE, Deadline)
    job_id = {t: i for t, _, i in tick(app.clock.now(), app=app).started}["dl-report"]
    assert queue.get(job_id, app=app)["expires_at"] == datetime(2027, 3, 2, 9, 5)

    class Bad(Deadline):
        TYPE = "dl.bad.discover"
        STARTING_DEADLINE = "soon"

    with pytest.raises(HandlerError, match="STARTING_DEADLINE must be a duration.*'soon'"):
        app.handlers.register(Bad.TYPE, Bad)


def _cli(args: list[str], stdin: bytes | None = None):
    from click.testing import CliRunner

    from cronjobs.cli import main

    return CliRunner().invoke(main, args, input=stdin)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_cli_dispatch_expires_in_and_expires_at(app):
    one = _cli(["dispatch", Plain.TYPE, "--expires-in", "30s"])
    two = _cli(["dispatch", Plain.TYPE, "--at", "2027-03-02T10:00", "--expires-in", "5m"])
    three = _cli(["dispatch", Plain.TYPE, "--expires-at", "2027-03-02T12:30+03:00"])
    assert [r.exit_code for r in (one, two, three)] == [0, 0, 0], one.output + two.output
    got = [queue.get(int(r.output.split()[-1]), app=app)["expires_at"]
           for r in (one, two, three)]
    assert got == [T0 + timedelta(seconds=30), datetime(2027, 3, 2, 10, 5),
                   datetime(2027, 3, 2, 9, 30)]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("args", "words"), [
    (["--expires-in", "soon"], "--expires-in must be a duration"),
    (["--expires-in", "30s", "--expires-at", "2027-03-02T12:00"], "not both"),
    (["--expires-at", "2027-03-02T08:00"], "expires_at must be after the row's start"),
    (["--expires-at", "noon"], "not an ISO 8601 time"),
])
def test_cli_dispatch_refuses_a_bad_expiry_in_one_line(app, args, words):
    result = _cli(["dispatch", Plain.TYPE, *args])
    assert result.exit_code != 0 and words in result.output, result.output
    assert drain(app).reports == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.filterwarnings("ignore:'get_binary_stream' is deprecated")  # the CLI's own, in-process
def test_stdin_lines_with_expires_in_and_expires_at(app):
    lines = [{"type": Plain.TYPE, "expires_in": "2m"},
             {"type": Plain.TYPE, "at": "2027-03-02T10:00", "expires_in": 60},
             {"type": Plain.TYPE, "expires_at": "2027-03-02T09:45Z"}]
    result = _cli(["dispatch", "--stdin"], "".join(json.dumps(r) + "\n" for r in lines).encode())
    assert result.exit_code == 0, result.output
    got = [queue.get(int(i), app=app)["expires_at"] for i in result.output.split()]
    assert got == [T0 + timedelta(minutes=2), datetime(2027, 3, 2, 10, 1),
                   datetime(2027, 3, 2, 9, 45)]
    bad = [{"type": Plain.TYPE}, {"type": Plain.TYPE, "expires_in": "1m",
                                  "expires_at": "2027-03-02T09:45Z"}]
    result = _cli(["dispatch", "--stdin"], "".join(json.dumps(r) + "\n" for r in bad).encode())
    assert result.exit_code == 2 and "line 2: give expires_at or expires_in, not both" \
        in result.output, result.output
    stdin_time = _cli(["dispatch", "--stdin"], b'{"type": "%s", "expires_at": 5}\n'
                      % Plain.TYPE.encode())
    assert 'line 1: "expires_at" must be a string' in stdin_time.output
    assert len(drain(app).reports) == 2  # the bad lines inserted nothing; one row is for 10:00


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_cleanup_deletes_expired_rows_after_the_cancelled_retention(app):
    job_id = queue.dispatch(Plain.TYPE, expires_in=10, app=app)
    later(app, 11)
    assert expire(app) == [job_id]
    later(app, 6 * 86400)
    assert queue.cleanup(dry_run=True, app=app)["cancelled"] == 0
    later(app, 2 * 86400)  # past the 7 days of `retention_cancelled_days`
    assert queue.cleanup(dry_run=True, app=app)["cancelled"] == 1
    assert queue.cleanup(app=app) == {"completed": 0, "failed": 0, "cancelled": 1}
    assert queue.get(job_id, app=app) is None


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_job_page_shows_the_deadline_and_the_expired_status(make_app):
    from dashboard_helpers import BEARER, TOKEN, web_client

    app = make_app(clock=FrozenClock(T0), handler_paths=(), dashboard_token=TOKEN)
    app.handlers.register(Plain.TYPE, Plain)
    job_id = queue.dispatch(Plain.TYPE, expires_in="5m", app=app)
    later(app, 301)
    expire(app)
    client = web_client(app)
    html = client.get(f"/jobs/{job_id}", headers=BEARER).get_data(as_text=True)
    assert 'class="deadline"' in html and 'class="status st-expired">expired<' in html
    listed = client.get("/queue?status=expired", headers=BEARER)
    assert listed.status_code == 200 and f"/jobs/{job_id}" in listed.get_data(as_text=True)
    minutes = client.get("/api/overview", headers=BEARER).get_json()["minutes"]
    assert (minutes[-1]["expired"], minutes[-1]["completed"]) == (1, 0)
    page = client.get("/", headers=BEARER).get_data(as_text=True)
    assert page.count('<rect class="seg-expired"') == 2  # the hour's and the day's charts
    assert "1 expired</title>" in page
