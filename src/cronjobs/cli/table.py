"""Tables of the command line, fitted to the terminal's width.

Piped output (not a terminal) keeps every column, one line per row, for `grep` and `awk`
(scripts read `--json`). On a terminal, a table given its `optional` columns fits the
width (`COLUMNS`, else the terminal's size): the columns that must stay are shown, then
each optional one, the most wanted first, that still fits; when those that must stay are
wider than the terminal, the widest cells wrap onto more lines, at spaces and hyphens only
(never inside a word, a number or a name; never narrower than their heading or 10
characters; `whole` columns, such as a cron line, never wrap: a table that cannot fit
otherwise is wider than the terminal). `--wide` keeps every column.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from collections.abc import Iterator, Sequence

GAP = 2  # spaces between two columns
NARROWEST = 10  # a wrapped column is never narrower (unless its cells are)


def terminal_width() -> int | None:
    """The width to fit a table to: `COLUMNS` or the terminal's, when standard output is
    a terminal; None when it is not (a pipe, a file: no limit)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def layout(rows: list[dict], columns: Sequence[str], width: int | None,
           optional: Sequence[str] = (), whole: Sequence[str] = ()
           ) -> tuple[list[str], dict[str, int]]:
    """The columns to show and their widths (characters) for `rows` in `width`.

    Args:
        rows: the rows, each a dict holding every column (values shown with `str`).
        columns: the columns in the order shown.
        width: the width to fit (characters); None: every column at its natural width.
        optional: columns that may be left out, the most wanted first: each is shown
            when it still fits next to the others and those before it.
        whole: columns never wrapped (names people copy: a task, a type).

    Returns:
        `(shown, widths)`: the columns kept, in `columns` order, and each one's width.
        Only a table whose columns that must stay cannot fit is wider than `width`.
    """
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in columns}
    if width is None:
        return list(columns), widths
    kept = {c for c in columns if c not in optional}

    def total(names) -> int:
        return sum(widths[c] for c in names) + GAP * (len(names) - 1)

    for column in optional:
        if total(kept | {column}) <= width:
            kept.add(column)
    shown = [c for c in columns if c in kept]
    floor = {c: widths[c] if c in whole else min(widths[c], max(
        [len(c), NARROWEST] + [len(word) for r in rows for word in str(r[c]).split()]))
        for c in shown}
    while total(shown) > width:
        widest = max(shown, key=lambda c: (widths[c] > floor[c], widths[c]))
        if widths[widest] <= floor[widest]:
            break
        widths[widest] -= 1
    return shown, widths


def lines(rows: list[dict], shown: Sequence[str], widths: dict[str, int]) -> Iterator[str]:
    """The heading (upper case) and the rows of a table, a cell wider than its column
    wrapped onto the row's next lines (at spaces and hyphens only)."""
    yield "  ".join(c.upper().ljust(widths[c]) for c in shown).rstrip()
    for row in rows:
        cells = {c: _wrap(str(row[c]), widths[c]) for c in shown}
        for i in range(max(len(parts) for parts in cells.values())):
            yield "  ".join((cells[c][i] if i < len(cells[c]) else "").ljust(widths[c])
                            for c in shown).rstrip()


def _wrap(text: str, width: int) -> list[str]:
    if len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=True) or [""]
