"""Setup mistakes a new user makes get one line on stderr and a non-zero exit, never a
traceback, and nothing is created by accident."""

from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli


def env_for(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONJOBS_")}
    env.update(extra)
    return env


def one_line_error(out, code: int = 2) -> str:
    assert out.returncode == code, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert "Traceback" not in out.stderr
    return lines[0]


def test_missing_database_file_is_not_created(tmp_path):
    out = run_cli(["dispatch", "http.uptime.execute"], env_for(tmp_path), cwd=tmp_path)
    line = one_line_error(out)
    assert "does not exist; run `cronjobs migrate` first" in line
    assert list(tmp_path.iterdir()) == []


def test_database_without_tables(tmp_path):
    (tmp_path / "cronjobs.db").touch()
    line = one_line_error(run_cli(["tasks"], env_for(tmp_path), cwd=tmp_path))
    assert "has no cronjobs tables" in line and "cronjobs migrate" in line


def test_health_on_a_database_without_tables_says_to_migrate(tmp_path):
    (tmp_path / "cronjobs.db").touch()
    out = run_cli(["health", "--timeout", "5"], env_for(tmp_path), cwd=tmp_path)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "the database has no cronjobs tables; run `cronjobs migrate`" in out.stdout
    assert "OperationalError" not in out.stdout and "Traceback" not in out.stderr


def test_health_with_the_database_down_names_its_error_once(tmp_path):
    # A closed port: the database check fails with the driver's line; every check that
    # reads the database points at it instead of repeating that line.
    env = env_for(tmp_path, CRONJOBS_DATABASE_URL="mysql+pymysql://root@127.0.0.1:9/x",
                  CRONJOBS_BROKER_URL="redis://127.0.0.1:6379/15")
    out = run_cli(["health", "--json", "--timeout", "5"], env, cwd=tmp_path)
    assert out.returncode == 2, (out.stdout, out.stderr)
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["database"]["status"] == "fail"
    assert checks["database"]["message"].startswith("database unavailable: (2003, ")
    pointed = {name for name, c in checks.items()
               if c["message"] == "not checked: the database is unavailable (see the "
                                  "database check)"}
    assert pointed == {"queues", "workers", "scheduler", "overdue", "flow"}, checks
    assert all(checks[name]["status"] == "fail" for name in pointed)
    assert checks["broker"]["status"] == "ok" and checks["resources"]["status"] != "fail"
    assert sum("2003" in c["message"] for c in checks.values()) == 1


@pytest.mark.parametrize("text,missing", [
    ("(sqlite3.OperationalError) no such table: cronjob_queue", True),
    ("(pymysql.err.ProgrammingError) (1146, \"Table 'x.cronjob_queue' doesn't exist\")", True),
    ('(psycopg.errors.UndefinedTable) relation "cronjob_queue" does not exist', True),
    ('(psycopg.OperationalError) connection failed: FATAL:  database "nope" does not exist',
     False),
    ("(pymysql.err.OperationalError) (2003, \"Can't connect to MySQL server\")", False)])
def test_a_missing_table_is_told_apart_from_other_errors(text, missing):
    from cronjobs.errors import names_missing_table

    assert names_missing_table(text) is missing


@pytest.mark.parametrize("extra,needle", [
    ({"CRONJOBS_DATABASE_URL": "nonsense"}, "not a database URL: 'nonsense'"),
    ({"CRONJOBS_BROKER_URL": "ftp://x"}, "unsupported broker URL 'ftp://x'"),
    ({"CRONJOBS_DATABASE_URL": "sqlite:////no/such/dir/x.db"}, "does not exist"),
    ({"CRONJOBS_LOG_LEVEL": "VERBOSE"}, "unknown log level 'VERBOSE' (DEBUG, INFO"),
])
def test_bad_settings(tmp_path, extra, needle):
    assert needle in one_line_error(run_cli(["tasks"], env_for(tmp_path, **extra), cwd=tmp_path))


def test_migrate_into_a_missing_folder(tmp_path):
    env = env_for(tmp_path, CRONJOBS_DATABASE_URL="sqlite:////no/such/dir/x.db")
    assert "folder of the database file does not exist" in one_line_error(
        run_cli(["migrate"], env, cwd=tmp_path))


def test_broken_handler_file(tmp_path):
    folder = tmp_path / "h"
    folder.mkdir()
    (folder / "BrokenExecute.py").write_text("import no_such_module_here\n")
    env = env_for(tmp_path, CRONJOBS_HANDLER_PATHS=str(folder))
    line = one_line_error(run_cli(["list-handlers"], env, cwd=tmp_path))
    assert "cannot load handler file" in line and "ModuleNotFoundError" in line


@pytest.mark.parametrize("args,needle", [
    (["get", "abc"], "Invalid value for 'JOB_ID'"),
    (["dispatch"], "Missing argument 'JOB_TYPE'"),
    (["worker", "--zzz"], "No such option '--zzz'. (see `cronjobs worker --help`)"),
    (["dispatch", "http.uptime.execute", "--payload", "null"], "must be a JSON object"),
])
def test_usage_errors_are_one_line(tmp_path, args, needle):
    assert needle in one_line_error(run_cli(args, env_for(tmp_path), cwd=tmp_path))


@pytest.mark.parametrize("query,needle,code", [
    # the server offers no TLS: PyMySQL refuses to go on without it (a database error: 1)
    ("?ssl_verify_cert=true", "database refused the connection: (2026, ", 1),
    # a setting that cannot be used (2)
    ("?ssl_ca=/nonexistent/ca.pem", "the database URL's TLS settings cannot be used: ", 2),
])
def test_tls_settings_the_database_url_cannot_use(tmp_path, query, needle, code):
    url = f"mysql+pymysql://root@127.0.0.1:3306/test{query}"
    out = run_cli(["get", "1"], env_for(tmp_path, CRONJOBS_DATABASE_URL=url), cwd=tmp_path)
    assert needle in one_line_error(out, code)


def test_a_database_that_refuses_the_login_says_so(tmp_path):
    url = "mysql+pymysql://nobody-cj:wrong@127.0.0.1:3306/test"
    out = run_cli(["get", "1"], env_for(tmp_path, CRONJOBS_DATABASE_URL=url), cwd=tmp_path)
    assert "database refused the connection: (" in one_line_error(out, 1)
