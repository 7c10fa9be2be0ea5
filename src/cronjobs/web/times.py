"""Times on the pages: relative to the page's now ("3 min. ago", "in 40 sec.", in the page's
language, by Babel), with the absolute UTC time on hover (`<time datetime title>`);
elapsed time of a running job; fire times in the scheduler's zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from babel.dates import format_timedelta
from flask_babel import get_locale
from flask_babel import gettext as _
from markupsafe import Markup

from .view import fmt_time, page_now

JUST_NOW_SECONDS = 1.0  # closer than this to the page's now: "now"


def relative(value: datetime, now: datetime) -> str:
    """`value` relative to `now` in the page's language: "3 min. ago", "in 40 sec.", "now".

    Args:
        value, now: naive UTC.
    """
    delta = value - now
    if abs(delta.total_seconds()) < JUST_NOW_SECONDS:
        return _("now")
    return format_timedelta(delta, add_direction=True, format="short", locale=get_locale())


def ago(value: datetime | None) -> Markup | str:
    """`<time>` with the time relative to the page's now and the UTC time on hover; an
    empty string for None."""
    if not isinstance(value, datetime):
        return ""
    return Markup('<time datetime="{}Z" title="{} UTC">{}</time>').format(
        value.isoformat(timespec="seconds"), fmt_time(value), relative(value, page_now()))


UNITS = ((86_400, "day"), (3_600, "hour"), (60, "minute"), (1, "second"))


def span(seconds: float) -> str:
    """A length of time in the page's language, in its two largest whole units: "12 sec",
    "3 min 12 sec", "2 hr 5 min" (rounded down to whole seconds)."""
    left = int(max(0.0, seconds))
    parts = []
    for size, unit in UNITS:
        if left >= size or (size == 1 and not parts):
            parts.append(format_timedelta(timedelta(seconds=left // size * size), format="short",
                                          granularity=unit, threshold=1, locale=get_locale()))
            left %= size
        if len(parts) == 2 or (parts and not left):
            break
    return " ".join(parts)


def elapsed(row: dict) -> str:
    """How long a running row has run: from its `started_at` to the page's now."""
    start = row.get("started_at")
    if not isinstance(start, datetime):
        return ""
    return span((page_now() - start).total_seconds())


def in_zone(value: datetime | None, zone: str) -> Markup | str:
    """`value` (naive UTC) as wall time in `zone` (`2026-01-05 14:00 +03`), with the UTC
    time and the relative time on hover."""
    if not isinstance(value, datetime):
        return ""
    local = value.replace(tzinfo=UTC).astimezone(ZoneInfo(zone))
    return Markup('<time datetime="{}Z" title="{} UTC">{} <span class="muted">{}</span></time>'
                  ).format(value.isoformat(timespec="seconds"), fmt_time(value),
                           local.strftime("%Y-%m-%d %H:%M %Z"), relative(value, page_now()))


def age(seconds: float) -> str:
    """`seconds` ago, relative to the page's now ("12 sec. ago")."""
    now = page_now()
    return relative(now - timedelta(seconds=seconds), now)


def install(web) -> None:
    """Register the filters `ago`, `age`, `elapsed`, `span` and the globals `in_zone`,
    `page_now` on the dashboard `web`."""
    web.jinja_env.filters.update(ago=ago, age=age, elapsed=elapsed, span=span)
    web.jinja_env.globals.update(in_zone=in_zone, page_now=page_now)
