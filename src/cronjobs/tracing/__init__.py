"""Tracing with OpenTelemetry (the optional extra `cronjobs[otel]`): off and free when it
is not installed.

Whether the OpenTelemetry API is importable is checked once, when this package is first
imported (`importlib.util.find_spec` of `opentelemetry.trace` and `.propagate`); only then
is `cronjobs.tracing.spans` (which imports the OpenTelemetry API) loaded, on first use.
Every hook here costs a None check when tracing is off:

- `context_of_dispatch()`: the current trace context (W3C `traceparent`, `tracestate`) as
  short JSON, stored in `cronjob_queue.trace_context` by every dispatch (None without a
  current span, or when tracing is off);
- `job_span(job)`: the span a job's handler runs in (`cronjobs.job.executor.call_handler`),
  a child of the stored context and linked to it, so one trace holds the dispatching span
  and every attempt's span;
- `claim_span`, `finish_span`: the worker's claim and outcome writes, recorded after the
  fact (only claims that took rows), linked to their rows' stored contexts;
- `flush(timeout_seconds)`: a job process, which ends by `os._exit`, exports its spans.

`enable(False)` turns tracing off in this process (and `enable(True)` on again, when the
API is importable): the public switch of the import check. With the API installed but no
SDK configured, the API's no-op tracer makes non-recording spans (little cost); the app
configures a `TracerProvider` (docs/tracing.md)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any


def _importable(name: str) -> bool:
    """Whether module `name` can be imported (its parent package is imported to tell;
    `opentelemetry` itself is a namespace package, left behind by an uninstall or made by
    an exporter alone: the API's modules are what count)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # no parent package
        return False


INSTALLED = _importable("opentelemetry.trace") and _importable("opentelemetry.propagate")
_on = INSTALLED  # the switch (`enable`)
_spans: Any = None  # `cronjobs.tracing.spans` once loaded while on
_NOTHING = nullcontext()


def enable(on: bool = True) -> bool:
    """Turn tracing on or off in this process (on by default when the OpenTelemetry API
    is importable). Affects rows dispatched and jobs run from now on.

    Args:
        on: True to trace (only possible when the API is installed), False for never.

    Returns:
        Whether tracing is now on (False when `on` but the API is not installed).
    """
    global _on, _spans
    _on = bool(on) and INSTALLED
    if not _on:
        _spans = None
    return _on


def enabled() -> bool:
    """Whether tracing is on in this process (see `enable`)."""
    return _on


def _loaded() -> Any:
    """The `spans` module while tracing is on (imported on first use), else None."""
    global _spans
    global _on
    if _spans is None and _on:
        try:
            from . import spans  # lazy: the OpenTelemetry API, only when installed and on
        except ImportError:  # a broken or partial install: off, never the job's failure
            _on = False
            return None
        _spans = spans
    return _spans


def context_of_dispatch() -> str | None:
    """The current trace context as compact JSON (`{"traceparent": ...}`, at most
    `spans.CONTEXT_MAX_CHARS` characters) for a new row's `trace_context`; None when
    tracing is off, no span is current, or the context is too long."""
    spans = _spans if _spans is not None else _loaded()
    return None if spans is None else spans.inject_current()


def job_span(job: Any) -> AbstractContextManager:
    """A context manager: the span `job` (a `cronjobs.handler.Job`) runs in, named after
    its type, child of (and linked to) its stored `trace_context`, with the attributes
    `cronjobs.job.id`, `cronjobs.job.attempt`, `cronjobs.job.queue`, `cronjobs.worker.id`;
    an exception is recorded on it and passes on. A no-op when tracing is off."""
    spans = _spans if _spans is not None else _loaded()
    return _NOTHING if spans is None else spans.job_span(job)


def claim_span(start_ns: int, worker_id: str, queue: str | None,
               rows: Iterable[dict]) -> None:
    """Record a claim that took `rows` (claimed row dicts, with `trace_context`), started
    at `start_ns` (`time.time_ns()`, nanoseconds since the epoch) and ending now: span
    `cronjobs.claim`, linked to the rows' stored contexts. Nothing when tracing is off."""
    spans = _spans if _spans is not None else _loaded()
    if spans is not None:
        spans.record("cronjobs.claim", start_ns, worker_id, queue, rows)


def finish_span(start_ns: int, worker_id: str, jobs: Iterable[Any]) -> None:
    """Record an outcome write of `jobs` (`Job`s) started at `start_ns` (nanoseconds since
    the epoch) and ending now: span `cronjobs.finish`, linked to the jobs' stored
    contexts. Nothing when tracing is off."""
    spans = _spans if _spans is not None else _loaded()
    if spans is not None:
        spans.record("cronjobs.finish", start_ns, worker_id, None,
                     ({"id": j.id, "trace_context": j.trace_context} for j in jobs))


def job_outcome(span: Any, kind: str, error: str | None) -> None:
    """Mark `span` (what `job_span` yielded; None when tracing is off) with the attempt's
    outcome `kind` (`Outcome.kind`): `failed` or `fatal` (the handler returned False or a
    bad value) is status ERROR described by `error` (text); anything else is left as is."""
    if span is not None and _spans is not None:
        _spans.set_outcome(span, kind, error)


def incoming(headers: Any) -> AbstractContextManager:
    """A context manager for a request that dispatches rows (`POST /api/jobs`): when
    tracing is on and no span is current, the trace context of the request's `headers`
    (a mapping: `traceparent`, `tracestate`) is current within it, so the rows'
    `trace_context` continues the caller's trace. A no-op otherwise."""
    spans = _spans if _spans is not None else _loaded()
    return _NOTHING if spans is None else spans.incoming(headers)


def flush(timeout_seconds: float) -> None:
    """Export the spans this process has not exported yet, waiting at most
    `timeout_seconds` (a job process ends by `os._exit`, which runs no exit hook). Nothing
    when tracing is off or no SDK provider is configured."""
    if _spans is not None:
        _spans.flush(timeout_seconds)
