"""`cronjobs dispatch --stdin`: many jobs from standard input, one JSON object a line.

Every line is checked (JSON, fields, type, limits) before any row is inserted, so a bad
line inserts nothing; then the rows are inserted `BATCH_ROWS` per transaction with
`queue.dispatch_many`. Standard input is read twice: a file (`< jobs.jsonl`) from where it
started, a pipe from a temporary copy made during the first reading. Memory holds one
batch at a time (and the ids, when they wait for the progress bar to end on a terminal).
"""

from __future__ import annotations

import difflib
import json
import sys
import tempfile
from collections.abc import Iterator
from typing import IO

import click

from .. import limits
from ..errors import InvalidJob
from .base import parse_time
from .progress import Progress

BATCH_ROWS = 1_000
# A line's keys (the options of `cronjobs dispatch`) -> the arguments of `dispatch_many`.
FIELDS = {"type": "type", "payload": "payload", "key": "idempotency_key", "parent": "parent_id",
          "priority": "priority", "at": "scheduled_at", "title": "title",
          "max_attempts": "max_attempts", "depends_on": "depends_on",
          "allow_failed": "allow_failed", "expires_in": "expires_in",
          "expires_at": "expires_at", "callback_url": "callback_url"}
PYTHON_NAMES = {"idempotency_key": "key", "parent_id": "parent", "scheduled_at": "at"}


class Lines:
    """The non-blank lines of a binary stream with their numbers (from 1), read twice.

    Args:
        stream: standard input (or any binary stream).
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self._start = stream.tell() if stream.seekable() else None
        self._copy = None if self._start is not None else tempfile.TemporaryFile()

    def first(self) -> Iterator[tuple[int, bytes]]:
        """Read the stream (copying it when it cannot be read again)."""
        return self._read(self.stream, self._copy)

    def again(self) -> Iterator[tuple[int, bytes]]:
        """The same lines once more."""
        if self._copy is not None:
            self._copy.seek(0)
            return self._read(self._copy, None)
        self.stream.seek(self._start)
        return self._read(self.stream, None)

    def close(self) -> None:
        """Remove the temporary copy."""
        if self._copy is not None:
            self._copy.close()

    @staticmethod
    def _read(stream: IO[bytes], copy: IO[bytes] | None) -> Iterator[tuple[int, bytes]]:
        number = 0
        while line := stream.readline(limits.STDIN_LINE_MAX_BYTES + 2):
            number += 1
            text = line[:-1] if line.endswith(b"\n") else line
            if len(text) > limits.STDIN_LINE_MAX_BYTES:  # read no further into it
                raise InvalidJob(f"line {number}: longer than "
                                 f"{limits.STDIN_LINE_MAX_BYTES:,} bytes")
            if copy is not None:
                copy.write(line if line.endswith(b"\n") else line + b"\n")
            if text.strip():
                yield number, text


def parse_line(number: int, line: bytes, remote: bool = False) -> dict:
    """One line as the keyword arguments of a `queue.dispatch_many` job.

    Args:
        number: the line's number, for messages.
        line: a JSON object: `type` (required), `payload`, `key`, `parent`, `priority`,
            `at` (ISO 8601, UTC if naive), `title`, `max_attempts`, `depends_on`,
            `allow_failed`, `expires_in` (a duration: 90, "30s", "5m") or `expires_at`
            (ISO 8601), `callback_url` (an http(s) URL: the row's webhook).
        remote: accept a type no handler here knows (`--remote`).

    Raises:
        InvalidJob: `line N: <problem>` (not UTF-8, not JSON, not an object, an unknown
            key, no type, a bad time); the other checks are `check_line`'s.
    """
    try:
        data = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidJob(f"line {number}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InvalidJob(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno}): "
                         f"{line.decode('utf-8', 'replace')!r:.80}") from None
    except RecursionError:
        raise InvalidJob(f"line {number}: nested more than {limits.JSON_MAX_DEPTH} levels deep "
                         f"(objects and arrays inside each other); the limit is "
                         f"{limits.JSON_MAX_DEPTH}") from None
    if not isinstance(data, dict):
        raise InvalidJob(f'line {number}: must be a JSON object like {{"type": "a.b.execute", '
                         f'"payload": {{}}}}, got {type(data).__name__}: {data!r:.60}')
    for key in data:
        if key not in FIELDS:
            close = PYTHON_NAMES.get(key) or next(iter(difflib.get_close_matches(key, FIELDS, 1)),
                                                  None)
            raise InvalidJob(f"line {number}: unknown key {key!r}"
                             + (f" (did you mean {close!r}?)" if close else "")
                             + f"; the keys are {', '.join(FIELDS)}")
    if "type" not in data:
        raise InvalidJob(f'line {number}: no "type" (the job type, e.g. "a.b.execute")')
    job = {FIELDS[key]: value for key, value in data.items()}
    for name, key in (("scheduled_at", "at"), ("expires_at", "expires_at")):
        if job.get(name) is not None:
            job[name] = _time(number, job[name], key)
    job["known_type"] = not remote
    return job


def _time(number: int, value: object, key: str):
    try:
        if not isinstance(value, str):
            raise ValueError(f"must be a string, got {value!r:.40}")
        return parse_time(value)
    except ValueError as exc:
        raise InvalidJob(f'line {number}: "{key}" {exc}') from None


def check_line(app, number: int, job: dict) -> None:
    """Check a parsed line as `dispatch` would (type, payload, limits), inserting nothing.

    Raises:
        InvalidJob: `line N: <the reason dispatch gives>`.
    """
    from ..family import depends  # lazy: CLI start-up time (with `--stdin` only)
    from ..job.dispatching import build_row

    options = {k: v for k, v in job.items()
               if k not in ("type", "payload", "depends_on", "allow_failed")}
    try:
        depends.check_ids(job.get("depends_on"))
        if not isinstance(job.get("allow_failed", False), bool):
            raise InvalidJob(f"allow_failed must be true or false, got {job['allow_failed']!r:.40}")
        build_row(app, job["type"], job.get("payload"), **options)
    except InvalidJob as exc:
        raise InvalidJob(f"line {number}: {exc}") from None


def check_parents(app, parents: dict[int, int]) -> None:
    """Refuse the lines whose parent row does not exist, before any row is inserted.

    Args:
        parents: `{parent id: the first line naming it}`.

    Raises:
        InvalidJob: `line N: parent job ID does not exist`, for the first such line (a
            parent deleted after this check still stops its batch, as the database
            refuses it).
    """
    from sqlalchemy import select  # lazy: CLI start-up time (with `--stdin` only)

    from ..store.models import cronjob_queue as q

    ids, found = sorted(parents), set()
    with app.engine.connect() as conn:
        for start in range(0, len(ids), BATCH_ROWS):
            found.update(conn.execute(select(q.c.id).where(
                q.c.id.in_(ids[start:start + BATCH_ROWS]))).scalars())
    missing = [parent for parent in ids if parent not in found]
    if missing:
        first = min(missing, key=parents.__getitem__)
        raise InvalidJob(f"line {parents[first]}: parent job {first} does not exist")


def batches(lines: Iterator[tuple[int, bytes]], remote: bool
            ) -> Iterator[tuple[int, int, list[dict]]]:
    """`(first line, last line, jobs)` of at most `BATCH_ROWS` jobs each."""
    jobs: list[dict] = []
    first = 0
    for number, line in lines:
        first = first or number
        jobs.append(parse_line(number, line, remote))
        if len(jobs) == BATCH_ROWS:
            yield first, number, jobs
            jobs, first = [], 0
    if jobs:
        yield first, number, jobs


def dispatch_lines(app, stream: IO[bytes], *, remote: bool, quiet: bool) -> int:
    """`cronjobs dispatch --stdin`: check every line, then insert; print the ids (or,
    `quiet`, the count). Returns how many rows were dispatched.

    Raises:
        InvalidJob: a bad line or a missing parent (nothing inserted), or a batch the
            database refused (a parent deleted after the look: the batches before it stay,
            their ids printed).
    """
    from .. import queue  # lazy: CLI start-up time

    lines = Lines(stream)
    try:
        count, parents = 0, {}
        for number, line in lines.first():
            job = parse_line(number, line, remote)
            check_line(app, number, job)
            if job.get("parent_id") is not None:
                parents.setdefault(job["parent_id"], number)
            count += 1
        check_parents(app, parents)
        done = _insert(app, queue, lines.again(), count, remote=remote, quiet=quiet)
    finally:
        lines.close()
    if quiet:
        click.echo(f"dispatched {done} row(s)")
    return done


def _insert(app, queue, lines: Iterator[tuple[int, bytes]], count: int, *, remote: bool,
            quiet: bool) -> int:
    done, held = 0, []
    try:
        with Progress("dispatching", total=count, quiet=quiet) as bar:
            hold = bar.shown and sys.stdout.isatty()  # ids after the bar, not through it
            for first, last, jobs in batches(lines, remote):
                try:
                    ids = queue.dispatch_many(jobs, app=app)
                except InvalidJob as exc:
                    where = f"line {first}" if first == last else f"lines {first}-{last}"
                    before = (f"the {done:,} row(s) of the lines before were (ids printed)"
                              if done else "nothing was inserted")
                    raise InvalidJob(f"{where}: {exc}; not inserted, {before}") from None
                done += len(ids)
                if hold:
                    held += ids
                elif not quiet:
                    click.echo("\n".join(map(str, ids)))
                bar.update(done)
    finally:
        if held and not quiet:
            click.echo("\n".join(map(str, held)))
    return done
