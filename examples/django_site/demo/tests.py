"""The contract of `CronjobsBackend`, modelled on Django's own backend tests
(tests/tasks/ in Django): enqueue, get_result, refresh, priority / run_after /
queue_name validation, the caller's transaction (rollback, commit). Run with
`python manage.py test` (SQLite by default, `SITE_DATABASE_URL` for PostgreSQL)."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from django.core.management import call_command
from django.db import connection, transaction
from django.test import TransactionTestCase
from django.utils import timezone

from cronjobs.contrib.django import CronjobsBackend, connect
from cronjobs.contrib.django.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)
from demo import tasks

os.environ.setdefault("CRONJOBS_LOG_LEVEL", "WARNING")  # the migrate command's lines
SITE = Path(__file__).resolve().parent.parent


def row_count(job_id: str) -> int:
    """Rows of `cronjob_queue` with this id, read through Django's connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM cronjob_queue WHERE id = %s", [int(job_id)])
        return cursor.fetchone()[0]


def burst_worker() -> None:
    """`manage.py cronjobs worker --burst` in a process of its own, on the test database."""
    env = dict(os.environ, CRONJOBS_DATABASE_URL=connect.database_url(),
               CRONJOBS_LOG_LEVEL="WARNING")
    done = subprocess.run(
        [sys.executable, "manage.py", "cronjobs", "worker", "--burst", "--slots", "4",
         "--queues", "default,reports"], cwd=SITE, env=env, capture_output=True, text=True,
        timeout=60)
    assert done.returncode == 0, done.stderr


class CronjobsBackendTests(TransactionTestCase):
    """What Django's backend tests ask of a backend, and the transaction promise."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        call_command("cronjobs", "migrate")

    def setUp(self):
        self.sent = []
        self.stop = connect.get_app().broker.listen(lambda *msg: self.sent.append(msg))

    def tearDown(self):
        self.stop()

    def test_using_correct_backend(self):
        self.assertIsInstance(task_backends["default"], CronjobsBackend)
        self.assertIsInstance(tasks.add.get_backend(), CronjobsBackend)

    def test_enqueue_task(self):
        result = tasks.add.enqueue(1, 2)
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.finished_at)
        self.assertIsNotNone(result.enqueued_at)
        self.assertEqual((result.args, result.kwargs), ([1, 2], {}))
        self.assertEqual(result.task, tasks.add)
        with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
            _ = result.return_value
        self.assertEqual(row_count(result.id), 1)

    def test_enqueued_signal(self):
        seen = []

        def on_enqueued(sender, task_result, **kwargs):
            seen.append(task_result.id)

        task_enqueued.connect(on_enqueued)
        try:
            result = tasks.add.enqueue(1, 1)
        finally:
            task_enqueued.disconnect(on_enqueued)
        self.assertEqual(seen, [result.id])

    def test_get_result(self):
        result = tasks.add.enqueue(a=4, b=5)
        fetched = tasks.add.get_backend().get_result(result.id)
        self.assertEqual(fetched.id, result.id)
        self.assertEqual(fetched.status, TaskResultStatus.READY)
        self.assertEqual(fetched.kwargs, {"a": 4, "b": 5})
        self.assertEqual(tasks.add.get_result(result.id).id, result.id)

    def test_get_missing_result(self):
        for missing in ("123456789", "not-an-id", "99999999999999999999999", "²", "-1"):
            with self.assertRaises(TaskResultDoesNotExist):
                tasks.add.get_backend().get_result(missing)

    def test_invalid_priority(self):
        with self.assertRaises(InvalidTask):
            tasks.add.using(priority=101).enqueue(1, 1)
        with self.assertRaises(InvalidTask):
            tasks.add.using(priority=-101).enqueue(1, 1)

    def test_priority_mapped(self):
        result = tasks.report.enqueue("q")
        with connection.cursor() as cursor:
            cursor.execute("SELECT priority, queue FROM cronjob_queue WHERE id = %s",
                           [int(result.id)])
            self.assertEqual(cursor.fetchone(), (5 - 10, "reports"))

    def test_invalid_queue_name(self):
        with self.assertRaises(InvalidTask):
            tasks.add.using(queue_name="nowhere").enqueue(1, 1)

    def test_run_after_must_be_aware(self):
        with self.assertRaises(InvalidTask):
            tasks.add.using(run_after=timezone.now().replace(tzinfo=None)).enqueue(1, 1)

    def test_run_after_mapped(self):
        later = timezone.now() + timedelta(hours=1)
        result = tasks.add.using(run_after=later).enqueue(1, 1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT scheduled_at FROM cronjob_queue WHERE id = %s",
                           [int(result.id)])
            self.assertIsNotNone(cursor.fetchone()[0])
        self.assertEqual(self.sent[-1][1], "default")
        self.assertGreater(self.sent[-1][2], 3500)  # the message waits as the row does

    def test_arguments_must_be_json(self):
        with self.assertRaises((InvalidTask, TypeError)):
            tasks.add.enqueue(object(), 1)

    def test_rollback_leaves_no_row_and_sends_nothing(self):
        with self.assertRaises(RuntimeError), transaction.atomic():
            result = tasks.add.enqueue(1, 2)
            self.assertEqual(row_count(result.id), 1)
            raise RuntimeError("roll back")
        self.assertEqual(row_count(result.id), 0)
        self.assertEqual(self.sent, [])

    def test_commit_writes_the_row_and_sends_once(self):
        with transaction.atomic():
            result = tasks.add.enqueue(1, 2)
            self.assertEqual(self.sent, [])  # not before the commit
        self.assertEqual(row_count(result.id), 1)
        self.assertEqual([m[0] for m in self.sent], [int(result.id)])

    def test_worker_runs_tasks(self):
        added = tasks.add.enqueue(20, 22)
        context = tasks.attempt.enqueue("x")
        failed = tasks.fail.using(backend="once").enqueue()
        burst_worker()
        added.refresh()
        self.assertEqual(added.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(added.return_value, 42)
        self.assertIsNotNone(added.finished_at)
        self.assertEqual(added.attempts, 1)
        self.assertEqual(tasks.attempt.get_result(context.id).return_value,
                         {"value": "x", "attempt": 1})
        failed.refresh()
        self.assertEqual(failed.status, TaskResultStatus.FAILED)
        self.assertEqual(failed.errors[0].exception_class_path, "builtins.RuntimeError")
        self.assertIn("this task always fails", failed.errors[0].traceback)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            _ = failed.return_value

    def test_the_handler_runs_only_tasks_and_needs_admin_over_http(self):
        from cronjobs.contrib.django.handler import DjangoTask

        self.assertEqual(DjangoTask.DISPATCH_SCOPE, "admin")
        handler = DjangoTask()
        with self.assertRaisesMessage(ValueError, "the payload names no task"):
            handler.handle({}, None)
        with self.assertRaisesMessage(ValueError, "is not a task of Django's Tasks framework"):
            handler.handle({"task": "os.getcwd"}, None)


class AdminTests(TransactionTestCase):
    """The read-only admin of the rows."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        call_command("cronjobs", "migrate")

    def setUp(self):
        from django.contrib.auth.models import User

        User.objects.create_superuser("admin", "admin@example.com", "pw")
        self.client.login(username="admin", password="pw")

    def test_rows_listed_and_shown_not_editable(self):
        result = tasks.add.enqueue(1, 2)
        listing = self.client.get("/admin/cronjobs/job/")
        self.assertContains(listing, "django.task.execute")
        self.assertContains(self.client.get("/admin/cronjobs/job/?q=add"), "django.task.execute")
        self.assertEqual(self.client.get("/admin/cronjobs/job/?q=nothing-like-this").status_code,
                         200)
        page = self.client.get(f"/admin/cronjobs/job/{result.id}/change/")
        self.assertContains(page, "pending")
        self.assertNotContains(page, 'name="_save"')
        with self.assertLogs("django.request", "WARNING"):  # Django logs the 403
            self.assertEqual(self.client.get("/admin/cronjobs/job/add/").status_code, 403)
