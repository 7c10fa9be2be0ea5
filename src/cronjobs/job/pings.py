"""Pings out: tell an outside monitor (healthchecks.io, Cronitor and the like) that a
scheduled run started, succeeded or failed, so a stopped scheduler or worker is noticed
by the absence of pings.

A task's ping URL is `[tasks.<task>] ping_url`, else its handler's `PING_URL`, else the
settings' `ping_url_template` with `{task}` filled in; none of them: no ping, and the
cost of a row is one dict lookup (`PingOut.url_of`, cached per type). Only a **scheduled
run** pings (its idempotency key is `cronjobs:<task>:<slot>`), also when it runs through
`cronjobs run ID`:

- `<url>/start?rid=<row id>` after the claim's commit (`Executor.prepare`); the run waits
  for it up to `START_WAIT_SECONDS` (0.1 s; not at all while the receiver is down), so
  the receiver hears of the start before the handler runs;
- `<url>?rid=<row id>` after the outcome's commit when the row ended well (completed,
  cancelled, deleted);
- `<url>/fail?rid=<row id>` with the first KB of the error as a POST body when it ended
  `failed`. An attempt that failed and will be retried (back to `pending`) pings nothing:
  the run goes on, its next attempt pings `/start` again and its last one ends it.

A background thread (`PingSender`) sends them: a bounded queue (a full queue drops the
ping and counts it), a short timeout, bounded retries with back-off; one log line when the
receiver stops answering, one when it is back. A ping never delays or fails a job.
"""

from __future__ import annotations

import logging
import queue
import threading
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit

from ..app import App
from ..handler import Job, task_name
from ..status import Ended, Status

log = logging.getLogger("cronjobs.pings")

__all__ = ["BODY_MAX_BYTES", "PingOut", "PingSender", "ping_url"]

BODY_MAX_BYTES = 1024  # the first KB of a failed run's error goes with its /fail ping
QUEUE_SIZE = 1000  # pings waiting to be sent; more are dropped (and counted)
RETRIES = 3  # tries of one ping while the receiver answers; one try while it is down
BACKOFF_SECONDS = 0.25  # wait before the second try, doubled before each next one
START_WAIT_SECONDS = 0.1  # a scheduled run waits this long at most for its /start ping
IDLE_EXIT_SECONDS = 5.0  # the sender's thread ends after this long without a ping
_ENDED_WELL = (Status.COMPLETED, Status.CANCELLED, Ended.DELETED)

Opener = Callable[[urllib.request.Request, float], object]


def _open(request: urllib.request.Request, timeout: float) -> object:
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status


def ping_url(app: App, cls: type | None, task: str) -> str | None:
    """The ping URL of `task` (handler class `cls`, None when this process lacks it):
    `[tasks.<task>] ping_url`, else `PING_URL`, else the settings' `ping_url_template`
    with `{task}` replaced by the task name; None: the task does not ping. A trailing
    `/` is dropped."""
    url = app.settings.task(task).ping_url or getattr(cls, "PING_URL", None)
    template = app.settings.health.ping_url_template
    if not url and template:
        url = template.replace("{task}", task)
    return url.rstrip("/") if url else None


def scheduled(job: Job) -> bool:
    """True for a run the scheduler started: idempotency key `cronjobs:<task>:<slot>`
    (not a manual run's `cronjobs:<task>:manual:<token>`)."""
    key = job.idempotency_key
    if not key or not key.startswith("cronjobs:"):
        return False
    prefix = f"cronjobs:{task_name(job.type)}:"
    return key.startswith(prefix) and not key.startswith("manual:", len(prefix))


class PingSender:
    """Sends pings from a thread of its own, started by the first ping and ended after
    `IDLE_EXIT_SECONDS` without one (the next ping starts another).

    Args:
        timeout_seconds: one HTTP request's timeout, seconds.
        retries: tries of one ping while the receiver answers (one while it is down).
        backoff_seconds: wait before the second try, doubled for each next, seconds.
        queue_size: pings that may wait; a ping beyond is dropped and counted (`dropped`).
        opener: `opener(request, timeout)` sends one request and raises on failure
            (default: `urllib.request.urlopen`; an HTTP error status raises).
    """

    def __init__(self, timeout_seconds: float = 5.0, *, retries: int = RETRIES,
                 backoff_seconds: float = BACKOFF_SECONDS, queue_size: int = QUEUE_SIZE,
                 opener: Opener = _open) -> None:
        self.timeout_seconds = timeout_seconds
        self.retries = max(1, retries)
        self.backoff_seconds = backoff_seconds
        self._opener = opener
        self._queue: queue.Queue[tuple[str, bytes | None, threading.Event | None]] = \
            queue.Queue(queue_size)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0  # pings queued or being sent
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.down = False  # the last ping failed every try
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def send(self, url: str, body: bytes | None = None, *, wait_seconds: float = 0.0) -> bool:
        """Queue a ping of `url` (GET, or POST with `body`); never raises. With
        `wait_seconds`, wait that long at most for it to be sent (not at all while the
        receiver is down); else never blocks. Returns False when the queue was full and
        the ping was dropped."""
        sent = threading.Event() if wait_seconds > 0 and not self.down else None
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cronjobs-pings",
                                                daemon=True)
                self._thread.start()
            try:
                self._queue.put_nowait((url, body, sent))
            except queue.Full:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 1000 == 0:
                    log.warning("pings: the queue is full (%d waiting); %d ping(s) dropped",
                                self._queue.maxsize, self.dropped)
                return False
            self._pending += 1
        if sent is not None:
            sent.wait(wait_seconds)
        return True

    def flush(self, timeout_seconds: float) -> bool:
        """Wait up to `timeout_seconds` for the queued pings to be sent (or given up).
        True when none is left."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_seconds)

    def close(self) -> None:
        """Stop the thread after the ping it is sending (pings still queued are dropped)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                url, body, sent = self._queue.get(timeout=IDLE_EXIT_SECONDS)
            except queue.Empty:
                with self._lock:  # `send` starts a new thread after this one
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            try:
                self._deliver(url, body)
            finally:
                if sent is not None:
                    sent.set()
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _deliver(self, url: str, body: bytes | None) -> None:
        tries = 1 if self.down else self.retries
        wait = self.backoff_seconds
        for attempt in range(tries):
            try:
                request = urllib.request.Request(url, data=body,
                                                 method="POST" if body is not None else "GET")
                self._opener(request, self.timeout_seconds)
            except Exception as exc:  # any failure of the receiver is the ping's alone
                if attempt + 1 < tries and not self._stop.wait(wait):
                    wait *= 2
                    continue
                self.failed += 1
                if not self.down:
                    self.down = True
                    log.warning("pings: %s does not answer (%s: %.200s); pings are dropped "
                                "until it does", urlsplit(url).netloc, type(exc).__name__, exc)
                return
            self.sent += 1
            if self.down:
                self.down = False
                log.warning("pings: %s answers again", urlsplit(url).netloc)
            return


class PingOut:
    """The pings of the scheduled runs one executor runs (module docstring).

    Args:
        app: the App whose settings and handlers give the URLs.
        sender: the `PingSender` (default: one of this object's own, with the settings'
            `ping_timeout_seconds`, its thread started by the first ping).
    """

    def __init__(self, app: App, sender: PingSender | None = None) -> None:
        self.app = app
        self.sender = sender or PingSender(app.settings.health.ping_timeout_seconds)
        self._urls: dict[str, str | None] = {}  # type -> ping URL (None: no ping)

    def url_of(self, job_type: str, cls: type | None = None) -> str | None:
        """The ping URL of `job_type`'s task (`ping_url`), looked up once per type: from
        `cls`, its handler class when the caller resolved it already (the claim's terms),
        else resolved here."""
        try:
            return self._urls[job_type]
        except KeyError:
            cls = cls if cls is not None else self.app.resolve(job_type)
            url = ping_url(self.app, cls, task_name(job_type))
            self._urls[job_type] = url
            return url

    def started(self, job: Job, cls: type | None = None) -> None:
        """A claimed row is about to run: `/start?rid=<id>` if it is a scheduled run of a
        task that pings, waited for up to `START_WAIT_SECONDS`. `cls`: the row's handler
        class when the caller has it (no second resolve)."""
        url = self.url_of(job.type, cls)
        if url is not None and scheduled(job):
            self.sender.send(f"{url}/start?rid={job.id}", wait_seconds=START_WAIT_SECONDS)

    def ended(self, job: Job, final: str, error: str | None) -> None:
        """Row `job` was written as `final` (a status, `deleted` or `lost`): the success
        ping when it ended well, `/fail` with the first KB of `error` when it failed;
        nothing for a retry (`pending`) or a lost lease."""
        url = self.url_of(job.type)
        if url is None or not scheduled(job):
            return
        if final in _ENDED_WELL:
            self.sender.send(f"{url}?rid={job.id}")
        elif final == Status.FAILED:
            body = (error or "failed").encode("utf-8")[:BODY_MAX_BYTES]
            self.sender.send(f"{url}/fail?rid={job.id}", body)
