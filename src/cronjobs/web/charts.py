"""Charts drawn on the server as SVG: no script, no library, nothing fetched from elsewhere.

A chart is a row of columns; each column is a stack of segments (a value and the CSS class
that colours it: `seg-completed`, `seg-failed`, ...), with a tooltip (`<title>`) and an
optional label under it. Every text is escaped. The SVG scales to the width of its box
(`viewBox`), so it fits a phone as well as a wide screen; its axis labels are HTML placed
over and under it (in percent of its box), so they keep their size in CSS pixels however
far the drawing is scaled down (a text inside the SVG shrinks with it: 5.6 px on a phone).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from markupsafe import Markup

WIDTH, HEIGHT = 720, 180  # the viewBox; the page scales it
TOP, BOTTOM = 8, 1  # room for the top grid line's label and the base line


@dataclass
class Column:
    """One column of a chart.

    Attributes:
        segments: `(value, css_class)` stacked from the bottom; values >= 0.
        tip: the tooltip text (shown on hover).
        label: text under the column (empty: none).
        marker: a value drawn as a dot over the column (e.g. retries), or None.
    """

    segments: list[tuple[float, str]] = field(default_factory=list)
    tip: str = ""
    label: str = ""
    marker: float | None = None

    @property
    def total(self) -> float:
        """The height of the stack."""
        return sum(v for v, _cls in self.segments)


def nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= `value` (1 for 0)."""
    if value <= 0:
        return 1.0
    scale = 1.0
    while scale * 10 < value:
        scale *= 10
    while scale > value:
        scale /= 10
    return next(s * scale for s in (1, 2, 5, 10) if s * scale >= value)


def _number(value: float) -> str:
    """An axis label: whole numbers with thousands separators, small ones to 3 digits."""
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.3g}"


def bars(columns: list[Column], *, label: str, unit: str = "", chart_id: str = "") -> Markup:
    """A bar chart of `columns`, oldest left: an `<svg>` with its axis labels around it.

    Args:
        columns: the columns, left to right.
        label: what the chart shows (the SVG's accessible name).
        unit: appended to the axis labels (`s` for seconds).
        chart_id: the `id` of the `<svg>` (for links and tests).

    Returns:
        A `<div class="chart-area">` holding the `<svg>` (whose `data-total` holds the sum
        of every column: what a test or a script can read without parsing the drawing), the
        value labels (`span.axis.y`) and the column labels (`span.axis.x`).
    """
    top = nice_max(max([c.total for c in columns] + [c.marker or 0 for c in columns] + [0]))
    plot_h = HEIGHT - BOTTOM - TOP
    step = WIDTH / max(1, len(columns))
    gap = min(2.0, step * 0.2)
    parts = [Markup('<div class="chart-area"><div class="plot">'
                    '<svg class="chart" id="{}" viewBox="0 0 {} {}" role="img" aria-label="{}" '
                    'data-total="{}">').format(chart_id, WIDTH, HEIGHT, label,
                                               _number(sum(c.total for c in columns))),
             Markup("<title>{}</title>").format(label)]
    values = []
    for fraction in (0, 0.5, 1):
        y = TOP + plot_h * (1 - fraction)
        parts.append(Markup('<line class="grid" x1="0" x2="{}" y1="{:.1f}" y2="{:.1f}"/>')
                     .format(WIDTH, y, y))
        values.append(Markup('<span class="axis y" style="top: {:.2f}%">{}{}</span>').format(
            100 * y / HEIGHT, _number(top * fraction), unit))
    for i, column in enumerate(columns):
        parts.append(_column(column, i * step + gap / 2, step - gap, top, plot_h))
    parts.append(Markup("</svg>"))
    parts.extend(values)
    parts.append(Markup('</div><div class="x-labels" aria-hidden="true">'))
    every = max(1, len(columns) // 6)
    for i, column in enumerate(columns):
        if column.label and i % every == 0:
            parts.append(Markup('<span class="axis x" style="left: {:.2f}%">{}</span>').format(
                100 * i * step / WIDTH, column.label))
    parts.append(Markup("</div></div>"))
    return Markup("").join(parts)


def _column(column: Column, x: float, width: float, top: float, plot_h: float) -> Markup:
    """One column: its segments stacked, its marker, a transparent hover area with its tip."""
    out = [Markup("<g>")]
    base = TOP + plot_h
    for value, css in column.segments:
        if value <= 0:
            continue
        height = plot_h * value / top
        base -= height
        out.append(Markup('<rect class="{}" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}"/>')
                   .format(css, x, base, max(width, 0.5), height))
    if column.marker:
        out.append(Markup('<circle class="marker" cx="{:.1f}" cy="{:.1f}" r="2.5"/>').format(
            x + width / 2, TOP + plot_h * (1 - column.marker / top)))
    out.append(Markup('<rect class="hover" x="{:.1f}" y="{}" width="{:.1f}" height="{:.1f}">'
                      "<title>{}</title></rect></g>").format(x, TOP, max(width, 0.5), plot_h,
                                                              column.tip))
    return Markup("").join(out)
