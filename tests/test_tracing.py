"""Tracing (issue 40 §6, `cronjobs.tracing`): with the OpenTelemetry SDK and its in-memory
exporter, a row dispatched inside a span runs in a span of the same trace (a child of the
dispatching span, linked to it), each attempt a new span; the claim and the outcome write
make spans linked to their rows; with tracing off the column stays NULL and jobs run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from conftest import cli_env, run_cli
from cronjobs import CronJobHandler, queue, tracing
from cronjobs.clock import FrozenClock
from cronjobs.handler import RetryLater
from cronjobs.scheduler import tick
from cronjobs.testing import drain
from dashboard_helpers import BEARER, TOKEN, web_client

T0 = datetime(2026, 3, 1, 8, 0, 0)
_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans():
    """The in-memory exporter, emptied; the SDK's provider is the global one (set once per
    process: OpenTelemetry refuses to replace it)."""
    if trace.get_tracer_provider() is not _PROVIDER:
        trace.set_tracer_provider(_PROVIDER)
    assert tracing.enable(True), "the test extra installs the OpenTelemetry API"
    _EXPORTER.clear()
    yield _EXPORTER
    tracing.enable(True)
    _EXPORTER.clear()


class FlakyExecute(CronJobHandler):
    """Fails its first attempt, then dispatches a child and completes."""

    TYPE = "test.flaky.execute"
    ISOLATION = "thread"
    MAX_ATTEMPTS = 3

    def handle(self, payload, job):
        if job.attempts == 1:
            raise RuntimeError("first attempt fails")
        self.context.dispatch_child("test.shape.execute", {"shape": "true"})
        return True


def _stored(job_id: int) -> str | None:
    return queue.get(job_id, ["trace_context"])["trace_context"]


def _named(exporter, name: str) -> list:
    return sorted((s for s in exporter.get_finished_spans() if s.name == name),
                  key=lambda s: s.start_time)


def test_one_trace_from_the_dispatching_span_to_each_attempt(make_app, spans):
    clock = FrozenClock(T0)
    app = make_app(clock=clock)
    app.handlers.register(FlakyExecute.TYPE, FlakyExecute)
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        job_id = queue.dispatch(FlakyExecute.TYPE, {"n": 1})
    here = request.get_span_context()
    stored = json.loads(_stored(job_id))
    assert stored["traceparent"].split("-")[1:3] == [f"{here.trace_id:032x}",
                                                     f"{here.span_id:016x}"]
    drain(app)
    clock.advance(3600)  # the retry's backoff
    drain(app)
    assert queue.get(job_id)["status"] == "completed"

    first, second = _named(spans, FlakyExecute.TYPE)
    for attempt, span in enumerate((first, second), start=1):
        assert span.context.trace_id == here.trace_id, "one trace from dispatch to job"
        assert span.parent.span_id == here.span_id, "a child of the dispatching span"
        assert [link.context.span_id for link in span.links] == [here.span_id]
        assert span.kind == SpanKind.CONSUMER
        assert span.attributes["cronjobs.job.id"] == job_id
        assert span.attributes["cronjobs.job.attempt"] == attempt
        assert span.attributes["cronjobs.job.queue"] == queue.get(job_id)["queue"]
        assert span.attributes["cronjobs.worker.id"]
    assert first.context.span_id != second.context.span_id, "a retry is a new span"
    assert first.status.status_code == StatusCode.ERROR and first.events[0].name == "exception"
    assert second.status.status_code != StatusCode.ERROR

    # The child dispatched by the second attempt belongs to the trace, under that attempt.
    [child] = _named(spans, "test.shape.execute")
    assert child.context.trace_id == here.trace_id
    assert child.parent.span_id == second.context.span_id

    claims, finishes = _named(spans, "cronjobs.claim"), _named(spans, "cronjobs.finish")
    assert len(claims) == 3 and len(finishes) == 3, "two attempts and the child"
    assert claims[0].links[0].context.span_id == here.span_id
    assert claims[0].links[0].attributes["cronjobs.job.id"] == job_id
    assert claims[0].attributes["cronjobs.rows"] == 1
    assert {f.links[0].attributes["cronjobs.job.id"] for f in finishes[:2]} == {job_id}
    assert all(s.end_time >= s.start_time for s in claims + finishes)


@pytest.mark.parametrize("backend", ["mariadb", "postgresql"], indirect=True)
def test_dispatch_many_and_no_span_store_what_is_current(make_app, spans):
    app = make_app(clock=FrozenClock(T0))
    outside = queue.dispatch("test.shape.execute", {"shape": "true"})
    with trace.get_tracer("test").start_as_current_span("batch") as batch:
        ids = queue.dispatch_many([{"type": "test.shape.execute", "payload": {"shape": "true"}}
                                   for _ in range(3)])
    assert _stored(outside) is None, "no span current: no context stored"
    trace_id = f"{batch.get_span_context().trace_id:032x}"
    assert all(json.loads(_stored(i))["traceparent"].split("-")[1] == trace_id for i in ids)
    drain(app)
    jobs = _named(spans, "test.shape.execute")
    assert len(jobs) == 4
    assert sum(s.context.trace_id == batch.get_span_context().trace_id for s in jobs) == 3
    [root] = [s for s in jobs if s.parent is None]
    assert root.attributes["cronjobs.job.id"] == outside and root.links == ()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_scheduled_row_carries_none_and_a_bad_stored_context_is_ignored(make_app, spans):
    app = make_app(clock=FrozenClock(T0))
    tick(T0, app=app)
    with app.engine.connect() as conn:
        scheduled = conn.exec_driver_sql("SELECT trace_context FROM cronjob_queue").all()
    assert scheduled and all(c is None for (c,) in scheduled), "a tick has no span current"
    job_id = queue.dispatch("test.shape.execute", {"shape": "true"})
    with app.engine.begin() as conn:  # written by another program: not JSON
        conn.exec_driver_sql(f"UPDATE cronjob_queue SET trace_context = '{{no' "
                             f"WHERE id = {job_id}")
    report = drain(app)
    assert [r.status for r in report.reports if r.id == job_id] == ["completed"]
    [span] = [s for s in spans.get_finished_spans()
              if s.attributes.get("cronjobs.job.id") == job_id and s.name != "cronjobs.claim"
              and s.name != "cronjobs.finish"]
    assert span.parent is None and span.links == ()


class ExitExecute(CronJobHandler):
    TYPE = "test.exit.execute"
    MAX_ATTEMPTS = 1

    def handle(self, payload, job):
        raise SystemExit(3)  # a BaseException, as the job process's MAX_RUNTIME alarm


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_base_exception_ends_the_span_in_error(make_app, spans):
    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(ExitExecute.TYPE, ExitExecute)
    with trace.get_tracer("test").start_as_current_span("request"):
        job_id = queue.dispatch(ExitExecute.TYPE, {})
    assert [r.status for r in drain(app).reports] == ["failed"]
    [span] = _named(spans, ExitExecute.TYPE)
    assert span.attributes["cronjobs.job.id"] == job_id
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR,
                                                                 "SystemExit")


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"], indirect=True)
def test_off_the_column_stays_null_and_jobs_run(make_app, spans):
    app = make_app(clock=FrozenClock(T0))
    assert tracing.enable(False) is False and not tracing.enabled()
    with trace.get_tracer("test").start_as_current_span("request"):
        job_id = queue.dispatch("test.shape.execute", {"shape": "true"})
        many = queue.dispatch_many([{"type": "test.shape.execute",
                                     "payload": {"shape": "true"}}])
    assert _stored(job_id) is None and _stored(many[0]) is None
    assert [r.status for r in drain(app).reports] == ["completed", "completed"]
    assert [s.name for s in spans.get_finished_spans()] == ["request"], "no span of ours"
    tracing.flush(0.1)  # nothing to export, never raises
    assert tracing.enable(True) is tracing.INSTALLED is True


TRACED_HANDLER = '''
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from cronjobs import CronJobHandler

# docs/tracing.md: the SDK set up where the worker and its fork server import it (here a
# handler's module), once per process; job processes inherit it from the fork server.
if not isinstance(trace.get_tracer_provider(), TracerProvider):
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(
        out=open(os.environ["SPANS_FILE"], "a"), formatter=lambda s: s.to_json(indent=None)
        + "\\n")))
    trace.set_tracer_provider(provider)


class TracedExecute(CronJobHandler):
    TYPE = "test.traced.execute"

    def handle(self, payload, job):
        return {"success": True, "result": {"pid": os.getpid()}}
'''


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_a_job_process_exports_its_span_in_the_trace(make_app, db_url, namespace, spans,
                                                     tmp_path):
    """A burst worker in process isolation: the job's span, made and ended in the job
    process (its SDK's batch processor flushed as the process ends), is a child of the
    dispatching span; the worker's claim and finish spans are exported by the worker."""
    (tmp_path / "handlers").mkdir()
    (tmp_path / "handlers" / "TracedExecute.py").write_text(TRACED_HANDLER)
    out = tmp_path / "spans.jsonl"
    app = make_app(handler_paths=(str(tmp_path / "handlers"),))
    with trace.get_tracer("test").start_as_current_span("request") as request:
        ids = [queue.dispatch("test.traced.execute", {"n": n}, app=app) for n in range(2)]
    env = cli_env(db_url, namespace, CRONJOBS_HANDLER_PATHS=str(tmp_path / "handlers"),
                  SPANS_FILE=str(out))
    proc = run_cli(["worker", "--burst", "--isolation", "process", "--slots", "2"], env)
    assert proc.returncode == 0, proc.stderr
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    jobs = [s for s in exported if s["name"] == "test.traced.execute"]
    here = request.get_span_context()
    assert sorted(s["attributes"]["cronjobs.job.id"] for s in jobs) == ids
    assert {s["context"]["trace_id"] for s in jobs} == {f"0x{here.trace_id:032x}"}
    assert {s["parent_id"] for s in jobs} == {f"0x{here.span_id:016x}"}
    workers = {int(s["attributes"]["cronjobs.worker.id"].rsplit(":", 1)[1]) for s in jobs}
    pids = {json.loads(queue.get(i)["result_payload"])["pid"] for i in ids}
    assert len(workers) == 1 and not workers & pids, "the handlers ran in job processes"
    names = {s["name"] for s in exported}
    assert {"cronjobs.claim", "cronjobs.finish"} <= names


NO_PROVIDER = """
from types import SimpleNamespace
from opentelemetry import trace
from cronjobs import tracing
job = SimpleNamespace(id=1, type="a.execute", attempts=1, queue="q", worker_id="h:1",
                      trace_context='{"traceparent":"00-' + "1" * 32 + '-' + "2" * 16 + '-01"}')
with tracing.job_span(job) as inside:
    current = trace.get_current_span().get_span_context().is_valid
print(tracing.enabled(), inside is None, current, tracing.context_of_dispatch())
"""


def test_without_a_tracer_provider_no_span_is_made():
    """The API installed, no provider configured by the app (a fresh process): the job
    runs without a span (a check, not the no-op tracer's ~20 µs), nothing is stored."""
    out = subprocess.run([sys.executable, "-c", NO_PROVIDER], capture_output=True, text=True,
                         timeout=60, env={k: v for k, v in os.environ.items()
                                          if not k.startswith("OTEL_")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "False", "None"]


class LaterExecute(CronJobHandler):
    """Asks to be tried again later, once."""

    TYPE = "test.later.execute"
    ISOLATION = "thread"

    def handle(self, payload, job):
        raise RetryLater(30)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_false_is_an_error_and_retry_later_is_no_failure(make_app, spans):
    app = make_app(clock=FrozenClock(T0))
    app.handlers.register(LaterExecute.TYPE, LaterExecute)
    failed = queue.dispatch("test.shape.execute", {"shape": "false"})
    later = queue.dispatch(LaterExecute.TYPE, {})
    drain(app)
    by_id = {s.attributes["cronjobs.job.id"]: s for s in spans.get_finished_spans()
             if s.kind == SpanKind.CONSUMER}
    assert by_id[failed].status.status_code == StatusCode.ERROR
    assert by_id[failed].status.description  # the failure's text, not empty
    assert by_id[later].status.status_code == StatusCode.UNSET
    assert [e.name for e in by_id[later].events] == ["retry later"]
    assert by_id[later].events[0].attributes["cronjobs.retry.delay_seconds"] == 30


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_http_dispatch_continues_the_callers_trace(make_app, spans):
    app = make_app(clock=FrozenClock(T0), dashboard_token=TOKEN)
    client = web_client(app)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    header = {**BEARER, "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    one = client.post("/api/jobs", json={"type": "test.shape.execute"}, headers=header)
    batch = client.post("/api/jobs:batch", headers=header, json={"jobs": [
        {"type": "test.shape.execute"}, {"type": "test.shape.execute"}]})
    ids = [one.get_json()["id"]] + [j["id"] for j in batch.get_json()["jobs"]]
    for job_id in ids:
        assert trace_id in json.loads(_stored(job_id))["traceparent"], job_id
    plain = client.post("/api/jobs", json={"type": "test.shape.execute"}, headers=BEARER)
    assert _stored(plain.get_json()["id"]) is None  # no header, no span: no context
    tracing.finish_span(time.time_ns(), "w1", [])  # a write of no rows: no span
    assert _named(spans, "cronjobs.finish") == []
