"""Small bar charts drawn as SVG on the server: no JavaScript, no chart library.

Labels are escaped like every other text; numbers are formatted by Python, so nothing a model wrote
reaches the SVG unescaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

BAR_HEIGHT = 18
GAP = 6
LABEL_WIDTH = 190
BAR_WIDTH = 360
VALUE_WIDTH = 240
LABEL_CHARS = 28
"""A label longer than this is cut (the table beside the chart has it whole)."""


@dataclass(frozen=True, slots=True)
class Bar:
    """One row: a label and one or more stacked parts, each (value, css class)."""

    label: str
    parts: Sequence[tuple[float, str]]
    text: str = ""
    """Shown after the bar; the sum of the parts when empty."""
    marker: float | None = None
    """A tick drawn across the bar at this value (e.g. an upper confidence bound)."""


def bar_chart(bars: Sequence[Bar], *, title: str, scale: float | None = None) -> Markup:
    """Horizontal stacked bars. `scale` is the value of a full-width bar (default: the largest row)."""
    if not bars:
        return Markup("")
    top = scale if scale is not None else max((sum(v for v, _ in b.parts) for b in bars), default=0.0)
    top = top or 1.0
    height = len(bars) * (BAR_HEIGHT + GAP) + GAP
    width = LABEL_WIDTH + BAR_WIDTH + VALUE_WIDTH
    out = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>']
    for i, bar in enumerate(bars):
        y = GAP + i * (BAR_HEIGHT + GAP)
        label = bar.label if len(bar.label) <= LABEL_CHARS else bar.label[:LABEL_CHARS - 1] + "…"
        out.append(f'<text class="label" x="{LABEL_WIDTH - 8}" y="{y + BAR_HEIGHT - 5}" text-anchor="end">'
                   f"{escape(label)}</text>")
        x = float(LABEL_WIDTH)
        for value, css in bar.parts:
            w = max(0.0, value) / top * BAR_WIDTH
            if w > 0:
                out.append(f'<rect class="{escape(css)}" x="{x:.1f}" y="{y}" width="{w:.1f}" '
                           f'height="{BAR_HEIGHT}"><title>{escape(css)}: {value:g}</title></rect>')
            x += w
        if bar.marker is not None:
            mx = LABEL_WIDTH + min(bar.marker / top, 1.0) * BAR_WIDTH
            out.append(f'<line class="marker" x1="{mx:.1f}" x2="{mx:.1f}" y1="{y - 2}" y2="{y + BAR_HEIGHT + 2}"/>')
        text = bar.text or f"{sum(v for v, _ in bar.parts):g}"
        out.append(f'<text class="value" x="{x + 6:.1f}" y="{y + BAR_HEIGHT - 5}">{escape(text)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


@dataclass(frozen=True, slots=True)
class Point:
    """One labelled point of a scatter chart."""

    label: str
    x: float
    y: float


PLOT_WIDTH = 560
PLOT_HEIGHT = 300
MARGIN = 48


def scatter_chart(points: Sequence[Point], *, title: str, x_label: str, y_label: str) -> Markup:
    """Labelled points on axes that start at 0 (the Pareto view: solved against cost, up and to the left is
    better)."""
    if not points:
        return Markup("")
    # Points at the same place are one point with every label: two strategies that ran alike stay legible.
    merged: dict[tuple[float, float], list[str]] = {}
    for p in points:
        merged.setdefault((p.x, p.y), []).append(p.label)
    points = [Point(", ".join(labels), x, y) for (x, y), labels in merged.items()]
    top_x = max(p.x for p in points) * 1.1 or 1.0
    top_y = max(p.y for p in points) * 1.1 or 1.0
    width, height = PLOT_WIDTH + 2 * MARGIN + LABEL_WIDTH, PLOT_HEIGHT + 2 * MARGIN

    def at(p: Point) -> tuple[float, float]:
        return MARGIN + p.x / top_x * PLOT_WIDTH, MARGIN + PLOT_HEIGHT - p.y / top_y * PLOT_HEIGHT

    bottom, right = MARGIN + PLOT_HEIGHT, MARGIN + PLOT_WIDTH
    out = [f'<svg class="chart scatter" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
           f'<line class="axis" x1="{MARGIN}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
           f'<line class="axis" x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{bottom}"/>',
           f'<text class="label" x="{right}" y="{bottom + 32}" text-anchor="end">{escape(x_label)}</text>',
           f'<text class="label" x="{MARGIN}" y="{MARGIN - 12}">{escape(y_label)}</text>',
           f'<text class="value" x="{MARGIN}" y="{bottom + 16}" text-anchor="middle">0</text>',
           f'<text class="value" x="{right}" y="{bottom + 16}" text-anchor="middle">{top_x / 1.1:.0f}</text>',
           f'<text class="value" x="{MARGIN - 6}" y="{MARGIN + PLOT_HEIGHT - PLOT_HEIGHT / 1.1 + 4:.1f}" '
           f'text-anchor="end">{top_y / 1.1:g}</text>']
    for p in points:
        x, y = at(p)
        label = p.label if len(p.label) <= LABEL_CHARS else p.label[:LABEL_CHARS - 1] + "…"
        out.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="5"><title>{escape(p.label)}: '
                   f"{p.y:g} at {p.x:g}</title></circle>"
                   f'<text class="label" x="{x + 8:.1f}" y="{y + 4:.1f}">{escape(label)}</text>')
    out.append("</svg>")
    return Markup("".join(out))
