"""cronjobs.contrib.django (issue 40 §3): the Tasks backend, `manage.py cronjobs` and the
example site, run as a Django site runs them (subprocesses of examples/django_site).

- the example's contract suite (`manage.py test`, modelled on Django's backend tests) on
  SQLite, on both Pythons (Django 5.2 + django-tasks on 3.11, Django 6 on 3.13: `core`);
- on PostgreSQL + Redis: a rolled-back `atomic()` leaves 0 rows and sends 0 messages; a
  committed one has its 1,000 rows at once; `manage.py cronjobs worker --burst` drains
  them; `get_result()` shows a task's return value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from conftest import REDIS, ROOT

SITE = ROOT / "examples" / "django_site"


def site_env(**extra: str) -> dict:
    """The environment of a `manage.py` process: no stray CRONJOBS_* or SITE_* variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CRONJOBS_", "SITE_", "DJANGO_"))}
    env.update({"CRONJOBS_LOG_LEVEL": "WARNING", **extra})
    return env


def manage(args: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `python manage.py ARGS` in the example site; fail with its output if it fails."""
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=SITE, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.core
def test_example_site_contract_suite_on_sqlite(tmp_path):
    """`manage.py test` of examples/django_site: 15 contract tests pass."""
    done = manage(["test", "--noinput"], site_env(SITE_SQLITE_FILE=str(tmp_path / "site.db")))
    assert "Ran 16 tests" in done.stderr and "OK" in done.stderr, done.stderr


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_rollback_commit_and_a_burst_worker_drain_1000_tasks(db_url, namespace):
    """Django's `default` database is the cronjobs database (no CRONJOBS_DATABASE_URL):
    rollback -> no row, no message; commit -> 1,000 rows at once; the burst worker runs
    them all; `get_result()` reads the return value."""
    url = sa.make_url(db_url)
    env = site_env(SITE_DATABASE_URL=url.render_as_string(hide_password=False),
                   CRONJOBS_BROKER_URL=REDIS, CRONJOBS_BROKER_NAMESPACE=namespace)
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)

    def count(where: str = "") -> int:
        with engine.connect() as conn:
            return conn.exec_driver_sql(
                f"SELECT COUNT(*) FROM cronjob_queue WHERE type = 'django.task.execute'"
                f"{where}").scalar()

    rolled_back = json.loads(manage(["enqueue_adds", "5", "--rollback"], env).stdout)
    assert len(rolled_back["ids"]) == 5  # enqueued inside the transaction...
    assert rolled_back["sent"] == 0 and count() == 0  # ...rolled back: no row, no message

    committed = json.loads(manage(["enqueue_adds", "1000"], env).stdout)
    assert len(committed["ids"]) == 1000 and committed["sent"] >= 1
    assert count(" AND status = 'pending'") == 1000  # at once, before any worker

    manage(["cronjobs", "worker", "--burst", "--slots", "32"], env)
    assert count(" AND status = 'completed'") == 1000
    last = committed["ids"][-1]
    shown = manage(["shell", "--no-imports", "-c", "from demo import tasks; "
                    f"r = tasks.add.get_result('{last}'); print(r.status, r.return_value)"], env)
    assert shown.stdout.splitlines()[-1].split() == ["SUCCESSFUL", "1998"]
    engine.dispose()


def test_manage_py_errors_are_one_line_and_django_tasks_serve_every_queue(tmp_path):
    """A CRONJOBS_DATABASE naming no DATABASES entry: one line, exit 2 (as `cronjobs`);
    `worker --queues default,reports` does not warn of a queue the Django task handler
    serves (every queue)."""
    done = subprocess.run([sys.executable, "manage.py", "cronjobs", "get", "1"], cwd=SITE,
                          env=site_env(SITE_SQLITE_FILE=str(tmp_path / "site.db"),
                                       SITE_CRONJOBS_DATABASE="nosuch"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: CRONJOBS_DATABASE names no entry of DATABASES: 'nosuch'"]
    env = site_env(SITE_SQLITE_FILE=str(tmp_path / "site.db"))
    manage(["cronjobs", "migrate"], env)
    done = manage(["cronjobs", "worker", "--burst", "--queues", "default,reports"], env)
    assert "no registered handler uses queue" not in done.stderr, done.stderr
