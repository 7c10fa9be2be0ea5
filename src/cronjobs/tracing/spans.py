"""The OpenTelemetry calls of `cronjobs.tracing` (imported only when the API is installed
and tracing is on): the dispatch's context injected into the row, the job's span made
from it, the claim and finish spans recorded after the fact, the flush of a job process.

Names: the job span is named after the job's type (kind CONSUMER); the worker's spans are
`cronjobs.claim` and `cronjobs.finish`. Attributes: `cronjobs.job.id`,
`cronjobs.job.attempt`, `cronjobs.job.queue`, `cronjobs.worker.id`, `cronjobs.rows`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NoOpTracerProvider,
    ProxyTracerProvider,
    SpanKind,
    Status,
    StatusCode,
)

from ..handler import RetryLater

# The longest stored context (the column's size): a longer one keeps its traceparent only.
CONTEXT_MAX_CHARS = 1024
_TRACER = trace.get_tracer("cronjobs")  # a proxy until the app sets its provider
_NO_PROVIDER = (ProxyTracerProvider, NoOpTracerProvider)  # the API's, before the app sets one
_NOTHING = nullcontext()


def inject_current() -> str | None:
    """The current context as compact JSON (`propagate.inject`: `traceparent`,
    `tracestate`, what the app's propagators add), or None without a valid current span."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    text = json.dumps(carrier, separators=(",", ":"), sort_keys=True)
    if len(text) > CONTEXT_MAX_CHARS and "traceparent" in carrier:
        text = json.dumps({"traceparent": carrier["traceparent"]}, separators=(",", ":"))
    return text if len(text) <= CONTEXT_MAX_CHARS else None


def extract(text: str | None) -> Context | None:
    """The context stored as `text` (`inject_current`'s JSON), or None when there is none
    or it cannot be read (a row written by another program: never the job's failure)."""
    if not text:
        return None
    try:
        carrier = json.loads(text)
    except ValueError:
        return None
    if not isinstance(carrier, dict):
        return None
    context = propagate.extract({str(k): str(v) for k, v in carrier.items()})
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def _link(context: Context | None, attributes: dict | None = None) -> list[Link]:
    if context is None:
        return []
    return [Link(trace.get_current_span(context).get_span_context(), attributes)]


def job_span(job: Any) -> AbstractContextManager:
    """`_job_span(job)`, or a no-op while the app has configured no tracer provider (the
    API's proxy or no-op one: its spans record nothing, and made cost ~20 µs a job)."""
    if isinstance(trace.get_tracer_provider(), _NO_PROVIDER):
        return _NOTHING
    return _job_span(job)


@contextmanager
def _job_span(job: Any) -> Iterator[Any]:
    """The span `job` runs in: named `job.type`, a child of its stored context (a root
    span without one) and linked to it; yields the span. An exception is recorded on it
    (status ERROR; a BaseException such as the MAX_RUNTIME alarm: status ERROR naming its
    type) and passes on; a `RetryLater` is an event `retry later` (status UNSET)."""
    parent = extract(job.trace_context)
    attributes = {"cronjobs.job.id": job.id, "cronjobs.job.attempt": job.attempts,
                  "cronjobs.job.queue": job.queue}
    if job.worker_id:
        attributes["cronjobs.worker.id"] = job.worker_id
    with _TRACER.start_as_current_span(job.type, context=parent or Context(),
                                       kind=SpanKind.CONSUMER, links=_link(parent),
                                       attributes=attributes, record_exception=False,
                                       set_status_on_exception=False) as span:
        try:
            yield span
        except RetryLater as exc:  # no failure: status stays UNSET, an event says why
            span.add_event("retry later", {"cronjobs.retry.delay_seconds": exc.delay_seconds})
            raise
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:300]))
            raise
        except BaseException as exc:  # the MAX_RUNTIME alarm, SystemExit: not the API's
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def record(name: str, start_ns: int, worker_id: str, queue: str | None,
           rows: Iterable[dict]) -> None:
    """A span `name` from `start_ns` (nanoseconds since the epoch) to now, a root span
    linked to the stored context of each of `rows` (dicts with `id`, `trace_context`);
    nothing while the app has configured no tracer provider."""
    if isinstance(trace.get_tracer_provider(), _NO_PROVIDER):
        return
    links: list[Link] = []
    count = 0
    for row in rows:
        count += 1
        links += _link(extract(row.get("trace_context")), {"cronjobs.job.id": row["id"]})
    if count == 0:  # a write of no rows: no span
        return
    attributes: dict[str, Any] = {"cronjobs.worker.id": worker_id, "cronjobs.rows": count}
    if queue is not None:
        attributes["cronjobs.job.queue"] = queue
    _TRACER.start_span(name, context=Context(), links=links, attributes=attributes,
                       start_time=start_ns).end()


def set_outcome(span: Any, kind: str, error: str | None) -> None:
    """Mark the job span `span` with its attempt's outcome `kind` (`Outcome.kind`): a
    `failed` or `fatal` one (the handler returned False, or a bad value) is status ERROR
    described by `error`; any other leaves the status as it is."""
    if kind in ("failed", "fatal"):
        span.set_status(Status(StatusCode.ERROR, (error or kind)[:300]))


@contextmanager
def incoming(headers: Any) -> Iterator[None]:
    """Within it, the context of an incoming request's `headers` (W3C `traceparent`,
    `tracestate`; `propagate.extract`) is current, when no span is current already and
    the headers carry a valid one."""
    if trace.get_current_span().get_span_context().is_valid:
        yield
        return
    carrier = {str(k).lower(): str(v) for k, v in headers.items()}
    found = propagate.extract(carrier)
    if not trace.get_current_span(found).get_span_context().is_valid:
        yield
        return
    token = context.attach(found)
    try:
        yield
    finally:
        context.detach(token)


def flush(timeout_seconds: float) -> None:
    """`force_flush` of the global tracer provider when it has one (the SDK's), waiting
    at most `timeout_seconds`."""
    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is not None:
        force_flush(int(timeout_seconds * 1000))
