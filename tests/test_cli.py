"""The `cronjobs` command line, run as real subprocesses (`python -m cronjobs ...`).

Every command that touches the database runs on SQLite and MariaDB. Bad input must end
with exit status 2, one `error:` line (or click's usage block with one `Error:` line)
naming the problem and the value, no traceback, and nothing written to the database.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import SAMPLE_HANDLERS, cli_env, effects, new_database, run_cli
from cronjobs.store.models import cronjob_queue, cronjob_runtime, cronjob_slot

BOTH = pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
NOW = "2026-01-05T12:00:00"


# -- helpers ----------------------------------------------------------------------------
@pytest.fixture
def env(db_url: str) -> dict:
    """Environment of a `cronjobs` subprocess on this test's (migrated) database."""
    return cli_env(db_url)


@pytest.fixture
def cli(env: dict, tmp_path: Path):
    """`cli(*args)` runs `cronjobs ARGS` in an empty directory (no stray cronjobs.toml)."""

    def call(*args: str, extra_env: dict | None = None):
        return run_cli(list(args), {**env, **(extra_env or {})}, cwd=tmp_path)

    return call


@pytest.fixture
def engine(db_url: str):
    """An engine on the test database, for looking at (and arranging) rows directly."""
    eng = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    yield eng
    eng.dispose()


def ok(proc, code: int = 0) -> str:
    """Assert the exit status (and no traceback); return stdout."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def dispatch(cli, *args: str) -> int:
    out = ok(cli("dispatch", *args))
    assert re.fullmatch(r"\d+\n", out), out
    return int(out)


def get(cli, job_id: int) -> dict:
    """The row as `cronjobs get` prints it."""
    return json.loads(ok(cli("get", str(job_id))))


def row(engine: sa.Engine, job_id: int) -> dict:
    """The row read directly (cheaper than `cronjobs get`), payloads decoded."""
    with engine.connect() as conn:
        found = conn.execute(sa.select(cronjob_queue).where(cronjob_queue.c.id == job_id)
                             ).mappings().one()
    found = dict(found)
    for key in ("payload", "result_payload"):
        if found[key]:
            found[key] = json.loads(found[key])
    return found


def seed_row(engine: sa.Engine, type: str = "test.shape.execute", payload: dict | None = None,
             **values) -> int:
    """Insert one pending row directly (cheaper than `cronjobs dispatch`); return its id."""
    now = utcnow()
    with engine.begin() as conn:
        return conn.execute(cronjob_queue.insert().values(**{
            "type": type, "queue": "default", "status": "pending", "priority": 5,
            "payload": json.dumps(payload or {}), "attempts": 0, "max_attempts": 3,
            "created_at": now, "updated_at": now, **values})).inserted_primary_key[0]


def table_counts(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                for t in (cronjob_queue, cronjob_runtime, cronjob_slot)}


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def parse_table(out: str) -> tuple[list[str], list[dict]]:
    """Split a fixed-width table (header words start the columns) into dicts."""
    lines = out.rstrip("\n").splitlines()
    header = lines[0]
    names = header.split()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return names, rows


def _with_uptime_url(cli):
    """`cli` with an uptime URL configured (never fetched: nothing runs the rows), so the
    built-in `http-uptime` task has work and the scheduler starts it."""
    def call(*args: str, extra_env: dict | None = None):
        return cli(*args, extra_env={"CRONJOBS_UPTIME_URLS": "http://127.0.0.1:9/",
                                     **(extra_env or {})})
    return call


def tick_lines(out: str) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
    """`started TASK slot S as job N` / `skipped TASK: REASON` lines of `cronjobs tick`."""
    started, skipped = {}, {}
    for line in out.splitlines():
        if m := re.fullmatch(r"started (\S+) slot (\S+) as job (\d+)", line):
            started[m[1]] = (m[2], int(m[3]))
        elif m := re.fullmatch(r"skipped (\S+): (\S+)", line):
            skipped[m[1]] = m[2]
        else:
            raise AssertionError(f"unexpected tick output line: {line!r}")
    return started, skipped


# -- migrate ----------------------------------------------------------------------------
@BOTH
def test_migrate_creates_tables_and_is_repeatable(backend: str, tmp_path: Path) -> None:
    url, drop = new_database(backend, tmp_path)  # empty: not migrated yet
    try:
        env = cli_env(url)
        first = ok(run_cli(["migrate"], env, cwd=tmp_path))
        m = re.fullmatch(r"database at revision (\w+) \((.+)\)\n", first)
        assert m, first
        eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            tables = set(sa.inspect(eng).get_table_names())
            assert {"cronjob_queue", "cronjob_runtime", "cronjob_slot"} <= tables
            with eng.connect() as conn:
                stored = conn.exec_driver_sql(
                    "SELECT version_num FROM alembic_version").scalar_one()
            assert stored == m[1]
        finally:
            eng.dispose()
        again = ok(run_cli(["migrate"], env, cwd=tmp_path))
        assert again == first  # already at the newest revision: nothing to do, same answer
    finally:
        drop()


# -- list-handlers ----------------------------------------------------------------------
@SQLITE
def test_list_handlers_table(cli) -> None:
    names, rows = parse_table(ok(cli("list-handlers")))
    assert names == ["TYPE", "TASK", "CLASS", "SOURCE", "FREQUENCY", "QUEUE", "MAX_ATTEMPTS",
                     "MAX_RUNTIME", "LIMITS", "AVAILABLE"]
    by_type = {r["TYPE"]: r for r in rows}
    assert len(by_type) == len(rows)
    uptime = by_type["http.uptime.discover"]
    assert uptime["TASK"] == "http-uptime"
    assert uptime["CLASS"].endswith("HttpUptimeDiscover")
    assert "HttpUptimeDiscover.py" in uptime["SOURCE"]
    assert (uptime["FREQUENCY"], uptime["MAX_ATTEMPTS"], uptime["MAX_RUNTIME"],
            uptime["AVAILABLE"]) == ("minute", "3", "30", "True")
    shape = by_type["test.shape.execute"]
    assert shape["TASK"] == "test-shape"
    assert shape["CLASS"].endswith("ShapeExecute")
    assert shape["SOURCE"] == str(Path(SAMPLE_HANDLERS) / "ShapeExecute.py")
    assert (shape["FREQUENCY"], shape["MAX_ATTEMPTS"], shape["MAX_RUNTIME"],
            shape["AVAILABLE"]) == ("", "3", "120", "True")
    assert by_type["test.count.discover"]["FREQUENCY"] == "minute"


@SQLITE
def test_list_handlers_json(cli) -> None:
    rows = json.loads(ok(cli("list-handlers", "--json")))
    by_type = {r["type"]: r for r in rows}
    assert {"http.uptime.discover", "http.uptime.execute", "test.shape.execute",
            "test.record.execute", "test.count.discover"} <= set(by_type)
    uptime = by_type["http.uptime.discover"]
    assert uptime["task"] == "http-uptime"
    assert uptime["frequency"] == "minute"
    assert uptime["available"] is True
    shape = by_type["test.shape.execute"]
    assert shape == {**shape, "task": "test-shape",
                     "source": str(Path(SAMPLE_HANDLERS) / "ShapeExecute.py"),
                     "frequency": "", "max_attempts": 3, "max_runtime": 120,
                     "queue": "default", "concurrency": None, "rate_limit": None,
                     "limit_key": None, "available": True}
    assert shape["class"].endswith("ShapeExecute")


# Handlers with flow-control limits: class name -> (TYPE, its other constants).
LIMITED = {
    "ChatSendExecute": ("chat.send.execute", 'QUEUE = "chat"\n    CONCURRENCY = 2\n'
                                             '    RATE_LIMIT = "30/s"\n    LIMIT_KEY = "chat_id"'),
    "ChatRateExecute": ("chat.rate.execute", 'RATE_LIMIT = "5/m"'),
    "ChatKeyExecute": ("chat.key.execute", 'LIMIT_KEY = "acct"'),
}
HANDLER = """from cronjobs import CronJobHandler


class {name}(CronJobHandler):
    TYPE = "{type}"
    {constants}

    def handle(self, payload, job):
        return True
"""


@SQLITE
def test_list_handlers_shows_each_types_flow_limits(cli, tmp_path) -> None:
    folder = tmp_path / "limited"
    folder.mkdir()
    for name, (job_type, constants) in LIMITED.items():
        (folder / f"{name}.py").write_text(HANDLER.format(name=name, type=job_type,
                                                          constants=constants))
    extra = {"CRONJOBS_HANDLER_PATHS": f"{SAMPLE_HANDLERS}{os.pathsep}{folder}"}
    _, rows = parse_table(ok(cli("list-handlers", extra_env=extra)))
    by_type = {r["TYPE"]: r for r in rows}
    assert by_type["chat.send.execute"]["LIMITS"] == "at most 2 running, 30/s per chat_id"
    assert by_type["chat.send.execute"]["QUEUE"] == "chat"
    assert by_type["chat.rate.execute"]["LIMITS"] == "5/m"
    assert by_type["chat.key.execute"]["LIMITS"] == "key acct"  # blocks per key, no limit
    assert by_type["test.shape.execute"]["LIMITS"] == ""
    listed = {r["type"]: r for r in json.loads(ok(cli("list-handlers", "--json",
                                                      extra_env=extra)))}
    assert {k: listed["chat.send.execute"][k] for k in ("concurrency", "rate_limit",
                                                         "limit_key", "queue")} == {
        "concurrency": 2, "rate_limit": "30/s", "limit_key": "chat_id", "queue": "chat"}


# -- dispatch / get -----------------------------------------------------------------------
@BOTH
def test_dispatch_prints_id_and_get_prints_row(cli) -> None:
    title = "é" * 254 + "\N{SLIGHTLY SMILING FACE}"  # 255 characters, 4-byte UTF-8 at the end
    job_id = dispatch(cli, "test.shape.execute", "--payload", '{"shape": "true", "n": [1, 2]}',
                      "--title", title, "--priority", "3", "--max-attempts", "5",
                      "--at", "2030-01-01T01:00:00+01:00")
    row = get(cli, job_id)
    assert row["id"] == job_id
    assert row["type"] == "test.shape.execute"
    assert row["status"] == "pending"
    assert row["payload"] == {"shape": "true", "n": [1, 2]}
    assert row["title"] == title
    assert row["priority"] == 3
    assert (row["attempts"], row["max_attempts"]) == (0, 5)
    assert row["scheduled_at"].startswith("2030-01-01T00:00:00")  # stored in UTC
    assert row["idempotency_key"] is None and row["parent_id"] is None

    child = dispatch(cli, "test.shape.execute", "--parent", str(job_id))
    row = get(cli, child)
    assert row["parent_id"] == job_id
    assert row["max_attempts"] is None  # until a worker claims it: its handler decides
    assert row["payload"] == {}

    cols = json.loads(ok(cli("get", str(child), "--columns", "id,status")))
    assert cols == {"id": child, "status": "pending"}


@BOTH
def test_dispatch_same_key_twice_returns_same_id_with_a_note(cli, engine) -> None:
    first = cli("dispatch", "test.shape.execute", "--payload", '{"shape": "true"}', "--key", "k-1")
    job_id = int(ok(first))
    assert "note:" not in first.stderr
    second = cli("dispatch", "test.shape.execute", "--payload", '{"shape": "true"}', "--key", "k-1")
    assert int(ok(second)) == job_id
    note = second.stderr.strip()
    assert note.startswith("note:"), second.stderr
    assert "'k-1'" in note and f"job {job_id}" in note and "pending" in note
    assert table_counts(engine)["cronjob_queue"] == 1
    assert row(engine, job_id)["idempotency_key"] == "k-1"


# -- run ----------------------------------------------------------------------------------
@BOTH
def test_run_completes_a_pending_row(cli, engine) -> None:
    job_id = seed_row(engine, "test.record.execute", {"tag": "via-cli"})
    out = ok(cli("run", str(job_id)))
    assert re.fullmatch(rf"job {job_id} \(test\.record\.execute\): completed in \d+ ms\n", out), out
    done = row(engine, job_id)
    assert (done["status"], done["attempts"]) == ("completed", 1)
    assert done["finished_at"] is not None
    with engine.connect() as conn:
        recorded = conn.execute(sa.select(effects).where(effects.c.job_id == job_id)
                                ).mappings().all()
    assert [(r["kind"], r["info"]) for r in recorded] == [("record", "via-cli")]
    assert recorded[0]["pid"] != os.getpid()  # it ran in the CLI process

    again = cli("run", str(job_id))  # not pending any more: bad input, nothing changes
    assert_bad_input(again, f"job {job_id}", "completed", "not pending")
    assert row(engine, job_id) == done


@BOTH
def test_run_exit_status_1_when_the_job_fails(cli, engine) -> None:
    final = seed_row(engine, payload={"shape": "raise"}, max_attempts=1)
    out = ok(cli("run", str(final)), code=1)
    assert f"job {final} (test.shape.execute): failed" in out
    failed = row(engine, final)
    assert (failed["status"], failed["attempts"]) == ("failed", 1)
    assert "boom from handler" in failed["error"]

    retried = seed_row(engine, payload={"shape": "false"})
    out = ok(cli("run", str(retried)), code=1)  # failed attempt 1 of 3: back to pending
    assert f"job {retried} (test.shape.execute): pending" in out
    pending = row(engine, retried)
    assert (pending["status"], pending["attempts"]) == ("pending", 1)
    assert pending["scheduled_at"] > utcnow()  # backoff before the next attempt

    result = seed_row(engine, payload={"shape": "dict_ok"})
    ok(cli("run", str(result)))
    assert get(cli, result)["result_payload"] == {"answer": 42}


# -- tick and tasks -------------------------------------------------------------------------
@BOTH
def test_tick_starts_each_task_once_per_slot(cli, engine) -> None:
    cli = _with_uptime_url(cli)  # without one the uptime task is idle (test_uptime_idle)
    started, skipped = tick_lines(ok(cli("tick", "--now", NOW)))
    assert skipped == {"db-backup": "disabled"}  # destructive: ships disabled
    assert {t: s for t, (s, _) in started.items()} == {
        "cronjobs-cleanup": "20260105", "cronjobs-health": "202601051200",
        "cronjobs-recoverstale": "202601051200",
        "http-uptime": "202601051200", "test-count": "202601051200",
        "tls-certexpiry": "20260105"}
    for slot, job_id in started.values():
        job = row(engine, job_id)
        assert (job["status"], job["payload"]) == ("pending", {"slot": slot})
    assert row(engine, started["http-uptime"][1])["type"] == "http.uptime.discover"
    counts = table_counts(engine)
    assert counts["cronjob_queue"] == 6

    started, skipped = tick_lines(ok(cli("tick", "--now", NOW)))
    assert started == {}
    assert skipped == {"db-backup": "disabled",
                       **{t: "already-run" for t in ("cronjobs-cleanup", "cronjobs-health",
                                                     "cronjobs-recoverstale", "http-uptime",
                                                     "test-count", "tls-certexpiry")}}
    assert table_counts(engine) == counts

    started, skipped = tick_lines(ok(cli("tick", "--now", "2026-01-05T12:01:30Z")))
    assert set(started) == {"cronjobs-recoverstale", "test-count"}  # OVERLAP allow
    assert started["test-count"][0] == "202601051201"
    assert skipped["http-uptime"] == "running"  # its 12:00 run is still pending


@SQLITE
def test_tick_warns_of_a_now_ahead_of_the_clock(cli) -> None:
    """`tick --now` a minute or more in the future records its slots as run (the tasks
    start again only once the clock passes it): said on standard error, the tick still
    runs."""
    far = (datetime.now(UTC) + timedelta(days=400)).strftime("%Y-%m-%dT%H:%M")
    done = cli("tick", "--now", far)
    started, _ = tick_lines(ok(done))
    assert started
    assert done.stderr.startswith("warning: --now is 400 days ahead of the clock: the slots "
                                  "it starts are recorded as run"), done.stderr
    soon = cli("tick", "--now", (datetime.now(UTC) + timedelta(minutes=10)).strftime(
        "%Y-%m-%dT%H:%M")).stderr  # 9 to 10 minutes ahead (its minute's start)
    assert re.match(r"warning: --now is (9|10) minutes ahead of the clock", soon), soon
    assert "warning" not in cli("tick", "--now", datetime.now(UTC).strftime(
        "%Y-%m-%dT%H:%M")).stderr  # this minute


@BOTH
def test_tasks_list_disable_enable_and_run(cli, engine) -> None:
    cli = _with_uptime_url(cli)  # without one the uptime task is idle (test_uptime_idle)
    names, rows = parse_table(ok(cli("tasks")))
    assert names[:5] == ["TASK", "TYPE", "FREQUENCY", "ENABLED", "AVAILABLE"]
    by_task = {r["TASK"]: r for r in rows}
    assert {"http-uptime", "cronjobs-cleanup", "cronjobs-recoverstale", "test-count",
            "test-shape"} <= set(by_task)
    assert (by_task["http-uptime"]["TYPE"], by_task["http-uptime"]["FREQUENCY"],
            by_task["http-uptime"]["ENABLED"]) == ("http.uptime.discover", "minute", "True")

    assert ok(cli("tasks", "disable", "http-uptime")) == "http-uptime: disabled\n"
    started, skipped = tick_lines(ok(cli("tick", "--now", NOW)))
    assert skipped == {"http-uptime": "disabled", "db-backup": "disabled"}
    assert "http-uptime" not in started and "test-count" in started

    assert ok(cli("tasks", "enable", "http-uptime")) == "http-uptime: enabled\n"
    manual = int(ok(cli("tasks", "run", "http-uptime")))
    job = row(engine, manual)
    assert (job["type"], job["status"], job["payload"]) == ("http.uptime.discover", "pending",
                                                            {"manual": True})
    # The manual run does not take the slot: the same minute's tick still starts the task.
    started, skipped = tick_lines(ok(cli("tick", "--now", NOW)))
    assert started["http-uptime"][0] == "202601051200"
    assert started["http-uptime"][1] != manual
    assert "http-uptime" not in skipped
    _, rows = parse_table(ok(cli("tasks")))
    uptime = {r["TASK"]: r for r in rows}["http-uptime"]
    assert (uptime["ENABLED"], uptime["LAST_JOB"]) == ("True", str(started["http-uptime"][1]))


# -- maintenance ----------------------------------------------------------------------------
@BOTH
def test_recover_stale(cli, engine) -> None:
    gone = utcnow() - timedelta(minutes=1)
    lost = {"status": "running", "attempts": 1, "locked_until": gone, "started_at": gone,
            "worker_id": "lost-host:1"}  # a worker claimed them and died; the lease ran out
    retry = seed_row(engine, **lost)
    last = seed_row(engine, **{**lost, "max_attempts": 1})
    live = seed_row(engine, **{**lost, "worker_id": "live-host:1",
                               "locked_until": utcnow() + timedelta(minutes=5)})

    assert ok(cli("recover-stale", "--minutes", "0")) == "recovered 2 row(s)\n"
    rescued, dead = row(engine, retry), row(engine, last)
    assert rescued["status"] == "pending" and rescued["locked_until"] is None
    assert "recover-stale" in rescued["process_logs"] and "lost-host:1" in rescued["error"]
    assert dead["status"] == "failed" and "no attempts left" in dead["error"]
    assert row(engine, live)["status"] == "running"
    assert ok(cli("recover-stale", "--minutes", "0")) == "recovered 0 row(s)\n"


@BOTH
def test_cleanup_dry_run_then_cleanup(cli, engine) -> None:
    now = utcnow()
    ids = {name: seed_row(engine, **({"status": status, "finished_at": now - timedelta(days=age)}
                                     if status else {}))
           for name, status, age in (("old_done", "completed", 30), ("new_done", "completed", 1),
                                     ("old_failed", "failed", 40), ("new_failed", "failed", 10),
                                     ("pending", None, 0))}

    out = ok(cli("cleanup", "--dry-run"))
    assert out == "would delete: completed 1, failed 1, cancelled 0\n"
    assert table_counts(engine)["cronjob_queue"] == 5

    assert ok(cli("cleanup")) == "deleted: completed 1, failed 1, cancelled 0\n"
    with engine.connect() as conn:
        left = set(conn.execute(sa.select(cronjob_queue.c.id)).scalars())
    assert left == {ids["new_done"], ids["new_failed"], ids["pending"]}


# -- bad input ------------------------------------------------------------------------------
def assert_bad_input(proc, *needles: str) -> None:
    """Exit 2, nothing on stdout, no traceback, exactly one error line naming `needles`.

    Our own errors are that one `error:` line and nothing else; click's usage errors keep
    their `Usage:` / `Try ...` lines around the one `Error:` line.
    """
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error:", "Error:"))]
    assert len(errors) == 1, proc.stderr
    if errors[0].startswith("error:"):
        assert lines == errors, proc.stderr
    else:
        assert all(line.startswith(("Usage:", "Try ", "Error:")) for line in lines), proc.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


T = "test.shape.execute"
DB = ("sqlite", "mariadb")  # the database answers (or would refuse the value): both backends
ARGS = ("sqlite",)          # refused before any query: one backend is enough
BAD_INPUT = {
    # name: (backends, argv, extra environment, words the error line must contain)
    "unknown-type": (ARGS, ["dispatch", "no.such.execute"], {},
                     ["unknown job type", "no.such.execute"]),
    "payload-not-json": (ARGS, ["dispatch", T, "--payload", "{shape: true"], {},
                         ["--payload", "not valid JSON", "{shape: true"]),
    "payload-not-object": (ARGS, ["dispatch", T, "--payload", "[1]"], {}, ["JSON object", "[1]"]),
    "title-256": (DB, ["dispatch", T, "--title", "t" * 256], {}, ["title", "255", "256"]),
    "max-attempts-negative": (ARGS, ["dispatch", T, "--max-attempts", "-1"], {},
                              ["--max-attempts", "-1 is not in the range 1<=x<=2147483647"]),
    "max-attempts-zero": (ARGS, ["dispatch", T, "--max-attempts", "0"], {},
                          ["--max-attempts", "0 is not in the range 1<=x<=2147483647"]),
    # the column's range: refused by name on every backend, not by the database (or,
    # on SQLite, stored)
    "max-attempts-huge": (ARGS, ["dispatch", T, "--max-attempts", "99999999999999"], {},
                          ["--max-attempts", "99999999999999 is not in the range"]),
    "at-not-a-time": (ARGS, ["dispatch", T, "--at", "notatime"], {}, ["--at", "notatime"]),
    "at-out-of-range": (ARGS, ["dispatch", T, "--at", "0001-01-01T00:00:00+05:00"], {},
                        ["--at", "out of range", "0001-01-01T00:00:00+05:00"]),
    "key-too-long": (ARGS, ["dispatch", T, "--key", "k" * 192], {}, ["idempotency key", "191"]),
    "priority-overflow": (ARGS, ["dispatch", T, "--priority", str(2**40)], {},
                          ["--priority", str(2**40), "not in the range"]),
    "parent-missing": (DB, ["dispatch", T, "--parent", "999999"], {}, ["parent", "999999"]),
    "parent-overflow": (ARGS, ["dispatch", T, "--parent", str(2**70)], {},
                        ["parent", str(2**70)]),
    "get-missing": (DB, ["get", "999999"], {}, ["no job", "999999"]),
    "get-overflow": (ARGS, ["get", str(2**70)], {}, [str(2**70)]),
    "get-unknown-column": (ARGS, ["get", "EXISTING", "--columns", "id,nope"], {},
                           ["unknown column", "nope"]),
    "get-empty-columns": (ARGS, ["get", "EXISTING", "--columns", ""], {},
                          ["unknown column", "''"]),
    "run-missing": (DB, ["run", "999999"], {}, ["no job", "999999"]),
    "run-overflow": (ARGS, ["run", str(2**70)], {}, [str(2**70)]),
    "tick-out-of-range": (ARGS, ["tick", "--now", "9999-12-31T23:59:59"], {},
                          ["--now", "9999-12-31T23:59:59"]),
    "tasks-disable-unknown": (DB, ["tasks", "disable", "no-such-task"], {},
                              ["unknown task", "no-such-task"]),
    "tasks-run-unknown": (ARGS, ["tasks", "run", "no-such-task"], {},
                          ["unknown task", "no-such-task"]),
    "recover-stale-nan": (ARGS, ["recover-stale", "--minutes", "nan"], {}, ["minutes", "nan"]),
    "unknown-env-var": (ARGS, ["dispatch", T], {"CRONJOBS_DATABSE_URL": "sqlite:///typo.db"},
                        ["CRONJOBS_DATABSE_URL", "did you mean CRONJOBS_DATABASE_URL"]),
}


def snapshot(engine: sa.Engine) -> dict:
    """Every row of the cronjobs tables (a bad command must not change any of them)."""
    with engine.connect() as conn:
        return {t.name: [tuple(r) for r in conn.execute(sa.select(t).order_by(*t.primary_key))]
                for t in (cronjob_queue, cronjob_runtime, cronjob_slot)}


@pytest.mark.parametrize(("backend", "case"), [(b, c) for c, spec in BAD_INPUT.items()
                                                for b in spec[0]], indirect=["backend"])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(case: str, cli, engine) -> None:
    existing = seed_row(engine, payload={"shape": "true"})  # a row to leave alone
    before = snapshot(engine)
    _, argv, extra, needles = BAD_INPUT[case]
    argv = [str(existing) if a == "EXISTING" else a for a in argv]
    assert_bad_input(cli(*argv, extra_env=extra), *needles)
    after = snapshot(engine)
    assert len(after["cronjob_queue"]) == len(before["cronjob_queue"]) == 1
    assert after == before
