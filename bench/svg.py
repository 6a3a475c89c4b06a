"""Line charts as SVG, written by hand (the venv has no plotting library): panels side by side,
each with its x positions as labelled categories, a linear or log y axis, and one line per
series."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
PANEL_W, PANEL_H, MARGIN = 420, 300, 60


@dataclass
class Panel:
    title: str
    x_label: str
    y_label: str
    #: the x categories, left to right
    x_ticks: list[str]
    #: series name -> y per x category (None: no point)
    series: dict[str, list[float | None]] = field(default_factory=dict)
    log_y: bool = False


def render(panels: list[Panel], title: str) -> str:
    width = len(panels) * (PANEL_W + MARGIN) + MARGIN
    height = PANEL_H + 2 * MARGIN + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    for i, panel in enumerate(panels):
        parts.append(_panel(panel, MARGIN + i * (PANEL_W + MARGIN), MARGIN))
    parts.append("</svg>")
    return "\n".join(parts)


def _panel(panel: Panel, x0: float, y0: float) -> str:
    values = [v for ys in panel.series.values() for v in ys if v is not None and v > 0]
    low, high = (min(values), max(values)) if values else (1.0, 10.0)
    if panel.log_y:
        low, high = 10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(high))
        ticks = [10**e for e in range(round(math.log10(low)), round(math.log10(high)) + 1)]

        def y_of(v: float) -> float:
            return y0 + PANEL_H * (1 - (math.log10(v) - math.log10(low)) / math.log10(high / low))
    else:
        low, high = 0.0, high * 1.1
        step = _nice_step(high / 5)
        ticks = [k * step for k in range(int(high / step) + 1)]

        def y_of(v: float) -> float:
            return y0 + PANEL_H * (1 - (v - low) / (high - low))

    n = len(panel.x_ticks)

    def x_of(i: int) -> float:
        return x0 + PANEL_W * (i + 0.5) / n

    out = [
        f'<text x="{x0 + PANEL_W / 2}" y="{y0 - 12}" text-anchor="middle" font-size="12">'
        f"{escape(panel.title)}</text>",
        f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#888"/>',
    ]
    for t in ticks:
        y = y_of(t)
        out.append(
            f'<line x1="{x0}" x2="{x0 + PANEL_W}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{x0 - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
        )
    for i, label in enumerate(panel.x_ticks):
        out.append(
            f'<text x="{x_of(i):.1f}" y="{y0 + PANEL_H + 15}" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
    out.append(
        f'<text x="{x0 + PANEL_W / 2}" y="{y0 + PANEL_H + 32}" text-anchor="middle">'
        f"{escape(panel.x_label)}</text>"
        f'<text transform="translate({x0 - 45},{y0 + PANEL_H / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(panel.y_label)}</text>'
    )
    for k, (name, ys) in enumerate(panel.series.items()):
        color = COLORS[k % len(COLORS)]
        points = [(x_of(i), y_of(v)) for i, v in enumerate(ys) if v is not None and v > 0]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in points)
        ly = y0 + 14 + 14 * k
        out.append(
            f'<line x1="{x0 + 8}" x2="{x0 + 24}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" '
            f'stroke-width="2"/><text x="{x0 + 28}" y="{ly}">{escape(name)}</text>'
        )
    return "\n".join(out)


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)


def _fmt(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"
