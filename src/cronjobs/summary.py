"""Small HTML tables for handlers' Results tabs, with every label and value escaped."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from markupsafe import Markup, escape


def summary_table(rows: Iterable[tuple[str, Any]]) -> Markup:
    """Render `(label, value)` pairs as `<table class="summary">`, one row each.

    Labels and values are escaped (a value holding `<script>` shows as text); a value of
    None leaves its row out; a list is shown comma-separated; a `Markup` value is kept as
    HTML (the caller vouches for it).

    Args:
        rows: `(label, value)` pairs; labels are usually `cronjobs.i18n.gettext(...)`.

    Returns:
        The table as `Markup`, ready for a Jinja2 template with autoescape on.
    """
    cells = []
    for label, value in rows:
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = ", ".join(str(v) for v in value)
        cells.append(Markup("<tr><th>{}</th><td>{}</td></tr>").format(label, escape(value)))
    return Markup('<table class="summary">{}</table>').format(Markup("").join(cells))
