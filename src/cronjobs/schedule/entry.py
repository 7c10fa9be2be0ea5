"""One schedule entry of a handler (`SCHEDULES`, or stored at run time): its rules.

An entry `{"name": "tr", "cron": "0 9 * * *", "timezone": "Europe/Istanbul", "payload":
{"market": "tr"}}` of the handler whose task is `report` is the task `report:tr`, with
slots, a runtime row, a kill switch, OVERLAP and history of its own; its scheduled runs
get `{**payload, "slot": key, "schedule": name}`. Low in the house: the registry checks a
handler's `SCHEDULES` with `check_schedules` when it registers the class.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from .. import limits
from ..errors import InvalidJob
from ..handler import task_name
from .slots import check_frequency, check_zone

NAME = re.compile(r"^[a-z0-9_-]{1,64}$")
SEPARATOR = ":"
ENTRY_KEYS = ("name", "cron", "timezone", "payload")
PAYLOAD_MAX_BYTES = 16_000  # an entry's payload as JSON text


@dataclass(frozen=True)
class Entry:
    """One schedule entry.

    Attributes:
        task: the handler's task (`report`); `name`: the entry's name (`tr`).
        cron: what `FREQUENCY` accepts (a named frequency, a macro, a 5-field cron line).
        timezone: the IANA zone its cron line is read in; None: the handler's `TIMEZONE`,
            else the settings' zone.
        payload: merged under `slot` and `schedule` into each scheduled run's payload.
        source: `code` (the handler's `SCHEDULES`) or `database` (stored at run time).
        created_by: who stored it (`database` entries), else None.
    """

    task: str
    name: str
    cron: str
    timezone: str | None = None
    payload: dict = field(default_factory=dict)
    source: str = "code"
    created_by: str | None = None

    @property
    def entry_task(self) -> str:
        """The entry's own task name, `<task>:<name>`."""
        return entry_task(self.task, self.name)


def entry_task(task: str, name: str) -> str:
    """`<task>:<name>`: the task of entry `name` of handler task `task`."""
    return f"{task}{SEPARATOR}{name}"


def split_task(value: str) -> tuple[str, str]:
    """`(task, name)` of an entry task `<task>:<name>`.

    Raises:
        InvalidJob: `value` has no `:` or an empty side (one line naming the value).
    """
    task, sep, name = (value or "").rpartition(SEPARATOR)
    if not sep or not task or not name:
        raise InvalidJob(f"schedule must be TASK:NAME (such as report:tr), got {value!r:.80}")
    return task, name


def check_entry(name: object, cron: object, timezone: object = None,
                payload: object = None) -> dict:
    """Check one entry's fields.

    Args:
        name: `[a-z0-9_-]{1,64}`; cron: what `FREQUENCY` accepts; timezone: an IANA zone
            or None; payload: a JSON-serialisable dict or None (`{}`).

    Returns:
        The payload as a dict (`{}` for None).

    Raises:
        InvalidJob: one line naming the field and the value.
    """
    if not isinstance(name, str) or not NAME.match(name):
        raise InvalidJob(f"schedule name must be 1 to 64 of a-z, 0-9, '_' or '-', "
                         f"got {name!r:.80}")
    try:
        check_frequency(cron)
    except ValueError as exc:
        raise InvalidJob(f"schedule {name}: cron: {exc}".replace("FREQUENCY ", "")) from None
    if timezone is not None:
        try:
            check_zone(timezone)
        except ValueError:
            raise InvalidJob(f"schedule {name}: unknown time zone {timezone!r:.80}") from None
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise InvalidJob(f"schedule {name}: payload must be a JSON object (dict), got "
                         f"{type(payload).__name__}: {payload!r:.80}")
    # as a dispatched row's payload is checked (`job.rows`): depth, JSON, size
    limits.check_json_depth(payload, f"schedule {name}: payload")
    try:
        text = payload_text(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"schedule {name}: payload is not JSON-serialisable: {exc}") from None
    limits.check_json_size(text, f"schedule {name}: payload", PAYLOAD_MAX_BYTES)
    return payload


def payload_text(payload: dict) -> str:
    """An entry's payload as stored (`cronjob_schedule.payload`) and checked for size: JSON
    as a dispatched row's payload is written (ASCII, sorted keys; a lone surrogate escaped).

    Raises:
        TypeError, ValueError: `payload` is not JSON-serialisable (NaN included).
    """
    return json.dumps(payload, allow_nan=False, sort_keys=True)


def check_schedules(cls: type) -> list[Entry]:
    """The entries of a handler class's `SCHEDULES` (a list of dicts with `name`, `cron`,
    optional `timezone` and `payload`); `[]` when it has none.

    Raises:
        ValueError: one line naming the entry and what is wrong (an unknown key, a
            duplicate name, a bad name, cron line, zone or payload).
    """
    schedules = getattr(cls, "SCHEDULES", None)
    if schedules is None:
        return []
    if not isinstance(schedules, (list, tuple)):
        raise ValueError(f"SCHEDULES must be a list of dicts, got {schedules!r:.80}")
    entries: list[Entry] = []
    for i, spec in enumerate(schedules):
        where = f"SCHEDULES[{i}]"
        if not isinstance(spec, dict):
            raise ValueError(f"{where} must be a dict with name and cron, got {spec!r:.80}")
        unknown = sorted(set(spec) - set(ENTRY_KEYS))
        if unknown:
            raise ValueError(f"{where} ({spec.get('name')!r}): unknown key {unknown[0]!r} "
                             f"(keys: {', '.join(ENTRY_KEYS)})")
        try:
            payload = check_entry(spec.get("name"), spec.get("cron"), spec.get("timezone"),
                                  spec.get("payload"))
        except InvalidJob as exc:
            raise ValueError(f"{where}: {exc}") from None
        if any(e.name == spec["name"] for e in entries):
            raise ValueError(f"{where}: schedule name {spec['name']!r} is used twice")
        entries.append(Entry(task_name(cls.TYPE or ""), spec["name"], spec["cron"],
                             spec.get("timezone"), payload))
    return entries
