"""Long commands (`cleanup`, `failed --retry`, `dispatch --stdin`, `migrate`) draw a progress
bar with counts and a rate on a terminal, and write no bar (no carriage return) when piped
or with `--quiet`: only their final line."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
import sqlalchemy as sa

from conftest import cli_env, new_database
from cronjobs.migrate import pending
from cronjobs.store.engines import make_engine
from cronjobs.store.models import cronjob_queue as q
from dashboard_helpers import add_rows
from tty_helpers import run_on_tty, run_piped

BOTH = pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)
KIND = "test.summary.execute"
RATE = re.compile(r"[\d,]+ rows/s")


def statuses(app, job_type: str = KIND) -> dict[str, int]:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(q.c.status, sa.func.count()).where(
            q.c.type == job_type).group_by(q.c.status)).all())


def add_old_completed(app, n: int) -> None:
    old = app.clock.now() - timedelta(days=30)
    add_rows(app, n, type=KIND, status="completed", finished_at=old, created_at=old)


def add_failed(app, n: int) -> None:
    add_rows(app, n, type=KIND, status="failed", error="HTTP 503", attempts=3,
             finished_at=app.clock.now(), process_logs="[old] attempt 3/3 failed\n")


def no_bar(text: str) -> None:
    """No carriage return, no terminal escape code, no rate: nothing of a bar."""
    assert "\r" not in text and "\x1b[" not in text and "/s" not in text, text


def shows(out: str, count: str) -> bool:
    """`count` (`500/1,200 rows`) is in `out` as a whole number, not the end of another."""
    return re.search(r"(?<![\d,])" + re.escape(count), out) is not None


# -- cleanup --------------------------------------------------------------------------------

@BOTH
def test_cleanup_on_a_terminal_shows_rows_deleted_and_rate(make_app, db_url, tmp_path):
    app = make_app()
    add_old_completed(app, 350)
    env = cli_env(db_url, CRONJOBS_CLEANUP_BATCH_SIZE="100")
    code, out = run_on_tty(["cleanup"], env, tmp_path)
    assert code == 0, out
    assert "deleting old rows" in out and "\r" in out
    for count in ("100 rows", "200 rows", "300 rows", "350 rows"):  # one redraw per batch
        assert shows(out, count), out
    assert RATE.search(out), out
    assert out.rstrip().endswith("deleted: completed 350, failed 0, cancelled 0"), out
    assert statuses(app) == {}


@BOTH
def test_cleanup_piped_or_quiet_prints_only_the_final_line(make_app, db_url, tmp_path):
    app = make_app()
    add_old_completed(app, 250)
    env = cli_env(db_url, CRONJOBS_CLEANUP_BATCH_SIZE="100")
    piped = run_piped(["cleanup"], env, tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert (piped.stdout, piped.stderr) == ("deleted: completed 250, failed 0, cancelled 0\n", "")
    no_bar(piped.stdout)
    add_old_completed(app, 150)
    code, out = run_on_tty(["cleanup", "--quiet"], env, tmp_path)
    assert (code, out) == (0, "deleted: completed 150, failed 0, cancelled 0\n")
    assert statuses(app) == {}


# -- failed --retry -------------------------------------------------------------------------

@BOTH
def test_failed_retry_on_a_terminal_shows_the_batches_and_rate(make_app, db_url, tmp_path):
    app = make_app()
    add_failed(app, 1200)
    code, out = run_on_tty(["failed", "--retry"], cli_env(db_url), tmp_path)
    assert code == 0, out
    assert "started operation 1: retry failed (0 of 1,200 done)\n" in out
    assert "operation 1: retry" in out
    for count in ("0/1,200 rows", "500/1,200 rows", "1,000/1,200 rows", "1,200/1,200 rows"):
        assert shows(out, count), out
    assert RATE.search(out) and "100%" in out, out
    assert out.endswith("\nretried 1200 failed row(s)\n"), out
    assert statuses(app) == {"pending": 1200}


@BOTH
def test_failed_retry_piped_or_quiet_has_no_bar(make_app, db_url, tmp_path):
    app = make_app()
    add_failed(app, 700)
    piped = run_piped(["failed", "--retry"], cli_env(db_url), tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "retried 700 failed row(s)\n"
    assert piped.stderr == "started operation 1: retry failed (0 of 700 done)\n"
    add_failed(app, 600)
    quiet = run_piped(["failed", "--retry", "--quiet"], cli_env(db_url), tmp_path)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "retried 600 failed row(s)\n", "")
    add_failed(app, 550)
    code, out = run_on_tty(["failed", "--retry", "-q"], cli_env(db_url), tmp_path)
    assert (code, out) == (0, "retried 550 failed row(s)\n")
    assert statuses(app) == {"pending": 1850}


# -- dispatch --stdin -------------------------------------------------------------------------

def lines(n: int) -> bytes:
    return "".join(json.dumps({"type": KIND, "payload": {"n": i}}) + "\n"
                   for i in range(n)).encode()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_dispatch_stdin_on_a_terminal_shows_the_bar_then_the_ids(make_app, db_url, tmp_path):
    app = make_app()
    code, out = run_on_tty(["dispatch", "--stdin"], cli_env(db_url), tmp_path, stdin=lines(3000))
    assert code == 0, out
    bar, _, ids = out.rpartition("\n" + "1\n")  # the ids come after the bar's last line
    for count in ("0/3,000 rows", "1,000/3,000 rows", "2,000/3,000 rows", "3,000/3,000 rows"):
        assert shows(bar, count), bar
    assert "dispatching" in bar and RATE.search(bar), bar
    assert ("1\n" + ids).splitlines() == [str(i) for i in range(1, 3001)]
    assert statuses(app) == {"pending": 3000}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_dispatch_stdin_quiet_on_a_terminal_prints_the_count_only(make_app, db_url, tmp_path):
    app = make_app()
    code, out = run_on_tty(["dispatch", "--stdin", "--quiet"], cli_env(db_url), tmp_path,
                           stdin=lines(1500))
    assert (code, out) == (0, "dispatched 1500 row(s)\n")
    assert statuses(app) == {"pending": 1500}


# -- migrate --------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_migrate_counts_revisions_on_a_terminal_and_logs_them_when_piped(backend, tmp_path):
    env_of = {}
    for mode in ("tty", "piped", "quiet"):
        url, drop = new_database(backend, tmp_path / mode if backend == "sqlite" else tmp_path)
        if backend == "sqlite":
            (tmp_path / mode).mkdir()
        env_of[mode] = (cli_env(url, CRONJOBS_LOG_LEVEL="INFO"), url, drop)
    try:
        env, url, _ = env_of["tty"]
        engine = make_engine(url)
        todo = pending(engine)
        engine.dispose()
        assert len(todo) >= 6, todo
        code, out = run_on_tty(["migrate"], env, tmp_path)
        assert code == 0, out
        for n, rev in enumerate(todo, 1):
            assert f"revision {n} of {len(todo)} ({rev})" in out, out
        assert "migrating" in out and "Running upgrade" not in out, out
        assert out.endswith(f"database at revision {todo[-1]} ({url})\n"), out
        env, url, _ = env_of["piped"]
        piped = run_piped(["migrate"], env, tmp_path)
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout == f"database at revision {todo[-1]} ({url})\n"
        assert piped.stderr.count("Running upgrade") == len(todo)
        no_bar(piped.stderr)
        env, url, _ = env_of["quiet"]
        code, out = run_on_tty(["migrate", "--quiet"], env, tmp_path)
        assert (code, out) == (0, f"database at revision {todo[-1]} ({url})\n")
    finally:
        for _, _, drop in env_of.values():
            drop()
