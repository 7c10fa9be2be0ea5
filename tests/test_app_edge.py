"""The App only holds what a process was configured with; whoever runs jobs builds its
`Executor` with everything it needs, a worker hears of messages through the callback it
gives the broker (and puts them back while it is not taking rows), a failed send loses
nothing, and handlers of `cronjobs serve` learn its URL from their context."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from cronjobs import CronJobHandler, queue
from cronjobs.job.context import Runtime
from cronjobs.job.executor import Executor
from cronjobs.job.inline import InlineRunner
from cronjobs.worker.loop import WorkerProcess

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


class ContextExecute(CronJobHandler):
    TYPE = "test.context.execute"
    ISOLATION = "thread"

    def handle(self, payload, job):
        return {"success": True, "result": {"serve_url": self.context.serve_url}}


@SQLITE
def test_the_app_holds_no_part_of_a_runner(make_app):
    app = make_app()
    for name in ("executor", "pool", "on_send", "handle_message", "size_pool", "send"):
        assert not hasattr(app, name), name


def test_an_executor_gets_everything_through_its_constructor(make_app):
    app = make_app()
    app.handlers.register(ContextExecute.TYPE, ContextExecute)
    done = []
    executor = Executor(app, "host:7", isolation="process",
                        runtime=Runtime("http://127.0.0.1:8099"),
                        on_job_done=lambda: done.append(1))
    job_id = queue.dispatch(ContextExecute.TYPE, {})
    report = InlineRunner(executor).run_id(job_id)
    row = queue.get(job_id, ["status", "result_payload", "worker_id"])
    assert report.status == "completed" and done == [1] and executor.jobs_done == 1
    assert json.loads(row["result_payload"]) == {"serve_url": "http://127.0.0.1:8099"}
    assert row["worker_id"] == "host:7"
    assert not executor.terms(ContextExecute.TYPE).in_thread, \
        "isolation 'process' runs even thread handlers apart"
    assert Executor(app).terms(ContextExecute.TYPE).in_thread
    plain = queue.dispatch(ContextExecute.TYPE, {})
    InlineRunner(Executor(app)).run_id(plain)
    assert json.loads(queue.get(plain)["result_payload"]) == {"serve_url": None}
    with pytest.raises(ValueError, match="isolation must be 'handler' or 'process', got 'x'"):
        Executor(app, isolation="x")


@SQLITE
def test_a_consumer_hears_each_message_through_its_callback(make_app):
    app = make_app()
    heard: list[tuple[str, int]] = []
    arrived = threading.Event()

    def on_message(queue_name: str, job_id: int) -> None:
        heard.append((queue_name, job_id))
        arrived.set()

    consumer = app.broker.consume(["default"], on_message, threads=1)
    job_id = queue.dispatch("test.shape.execute", {"shape": "true"})
    consumer.start()
    try:
        assert arrived.wait(10)
    finally:
        consumer.stop(timeout=1000)
    assert heard == [("default", job_id)]
    assert queue.get(job_id, ["status"]) == {"status": "pending"}, "a message runs nothing"


@SQLITE
def test_a_worker_not_taking_rows_puts_messages_back(make_app):
    app = make_app()
    sent: list[tuple[int, str, float]] = []
    app.broker.listen(lambda job_id, queue_name, delay: sent.append((job_id, queue_name, delay)))
    worker = WorkerProcess(app, ["default"], 1)
    worker.start()
    try:
        job_id = queue.dispatch("test.shape.execute", {"shape": "true"}, app=app)
        sent.clear()
        worker.on_message("default", job_id)  # taking rows: it rings the pool
        deadline = time.monotonic() + 30
        while queue.get(job_id, ["status"])["status"] != "completed":
            assert time.monotonic() < deadline, "the rung pool did not run the row"
            time.sleep(0.02)
        assert sent == []
        worker.accepting.clear()  # as when it recycles or stops
        worker.on_message("default", 12345)
        assert sent == [], "held until its consumer has stopped (which would take it back)"
        worker.consumer.stop(timeout=1000)  # as `shutdown` does before the put-back
        queue.dispatch("test.shape.execute", {"shape": "true"}, app=app)  # due, not taken
        sent.clear()
        assert worker.relay.put_back() == ["default"]
        assert sent == [(12345, "default", 0)], "the message went back to the broker"
    finally:
        worker.shutdown(5)


@SQLITE
def test_a_failed_send_is_logged_and_the_row_stays(make_app, caplog):
    app = make_app()

    def broker_down(job_id, queue_name, delay):
        raise ConnectionError("broker down")

    app.broker.listen(broker_down)
    with caplog.at_level(logging.WARNING, logger="cronjobs.queue"):
        job_id = queue.dispatch("test.shape.execute", {})
    assert queue.get(job_id, ["status"]) == {"status": "pending"}
    assert (f"could not send job {job_id} to queue default (broker down); the sweep will "
            f"resend it") in caplog.text


@SQLITE
def test_the_uptime_task_checks_the_serve_url_when_no_url_is_configured(make_app):
    app = make_app()
    discover = queue.dispatch("http.uptime.discover", {"slot": "202601010000"})
    InlineRunner(Executor(app, runtime=Runtime("http://127.0.0.1:8099"))).run_id(discover)
    result = json.loads(queue.get(discover)["result_payload"])
    assert result["urls"] == ["http://127.0.0.1:8099/health"] and result["dispatched"] == 1
    child = queue.get(result["jobs"][0], ["type", "payload", "parent_id"])
    assert child["type"] == "http.uptime.execute" and child["parent_id"] == discover
    assert json.loads(child["payload"])["url"] == "http://127.0.0.1:8099/health"
    alone = queue.dispatch("http.uptime.discover", {"slot": "202601010001"})
    # No URL and no serve: no targets, cancelled (and, having no children, deleted).
    assert InlineRunner(Executor(app)).run_id(alone).status == "deleted"
    assert queue.get(alone) is None
