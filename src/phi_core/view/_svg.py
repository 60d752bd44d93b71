"""Small scatter charts as standalone SVG text (no charting library, no script): the web view's
Pareto front and the router's rewards over time.

Every label is XML-escaped, control characters replaced: combination and arm names come from
user configs and may hold any character. Each point carries a ``<title>`` (its tooltip when the SVG is shown inline).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Series", "nice_ticks", "scatter_svg"]

_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def escape(text: str) -> str:
    """``text`` as XML character data or attribute value: escaped, and the control characters
    XML 1.0 cannot hold replaced by U+FFFD (one in a label made the whole chart unreadable)."""
    return html.escape(_NOT_XML.sub("\ufffd", text))


_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
_W, _H = 440, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 62, 30, 16, 46


@dataclass(frozen=True)
class Series:
    """Points ``(x, y, tooltip)`` drawn alike; ``joined`` draws a line through them in order;
    ``kind`` ``muted`` is grey context, ``best`` a large red star."""

    name: str
    points: Sequence[tuple[float, float, str]]
    joined: bool = False
    kind: Literal["normal", "muted", "best"] = "normal"


Panel = tuple[str, str, Sequence[Series]]
"""``(x label, y label, series)``."""


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[low, high]``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:
        pad = abs(low) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = [round(start, 12)]
    while ticks[-1] < high - step * 1e-9:
        ticks.append(round(start + len(ticks) * step, 12))
    return ticks


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.001:
        return f"{value:.1e}"
    return f"{value:.4g}"


def scatter_svg(panels: Sequence[Panel], *, title: str, empty: str) -> str:
    """One SVG document with the ``panels`` side by side under ``title``; ``empty`` is shown
    instead when no panel has a point."""
    width = _W * max(1, len(panels))
    legend_names: dict[str, str] = {}
    parts: list[str] = []
    has_points = any(s.points for _x, _y, series in panels for s in series)
    for index, (xlabel, ylabel, series) in enumerate(panels):
        colours = _colours(series)
        for s in series:
            if s.points:
                legend_names.setdefault(s.name, colours[s.name])
        if has_points:
            parts.append(_panel(index * _W, 34, xlabel, ylabel, series, colours))
    height = _H + 34 + 24
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{width / 2:.1f}" y="20" text-anchor="middle" font-size="14" '
        f'font-weight="bold">{escape(title)}</text>',
    ]
    if not has_points:
        out.append(
            f'<text x="{width / 2:.1f}" y="{height / 2:.1f}" text-anchor="middle" '
            f'fill="#666666">{escape(empty)}</text>'
        )
    out += parts
    x = 12.0
    for name, colour in legend_names.items():
        y = height - 10
        out.append(f'<circle cx="{x + 5:.1f}" cy="{y - 4}" r="5" fill="{colour}"/>')
        out.append(f'<text x="{x + 14:.1f}" y="{y}">{escape(name)}</text>')
        x += 28 + 7 * len(name)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _colours(series: Sequence[Series]) -> dict[str, str]:
    colours: dict[str, str] = {}
    normal = 0
    for s in series:
        if s.kind == "muted":
            colours[s.name] = "#b0b0b0"
        elif s.kind == "best":
            colours[s.name] = "#d62728"
        else:
            colours[s.name] = _PALETTE[normal % len(_PALETTE)]
            normal += 1
    return colours


def _panel(
    left: float,
    top: float,
    xlabel: str,
    ylabel: str,
    series: Sequence[Series],
    colours: dict[str, str],
) -> str:
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points]
    xticks = nice_ticks(min(xs, default=0.0), max(xs, default=1.0))
    yticks = nice_ticks(min(ys, default=0.0), max(ys, default=1.0))
    x0, x1 = xticks[0], xticks[-1]
    y0, y1 = yticks[0], yticks[-1]
    plot_l, plot_r = left + _LEFT, left + _W - _RIGHT
    plot_t, plot_b = top + _TOP, top + _H - _BOTTOM

    def sx(v: float) -> float:
        return plot_l + (v - x0) / ((x1 - x0) or 1.0) * (plot_r - plot_l)

    def sy(v: float) -> float:
        return plot_b - (v - y0) / ((y1 - y0) or 1.0) * (plot_b - plot_t)

    out = [
        f'<g class="panel"><rect x="{plot_l:.1f}" y="{plot_t:.1f}" width="{plot_r - plot_l:.1f}" '
        f'height="{plot_b - plot_t:.1f}" fill="#fafafa" stroke="#cccccc"/>'
    ]
    for t in xticks:
        out.append(
            f'<line x1="{sx(t):.1f}" y1="{plot_b:.1f}" x2="{sx(t):.1f}" y2="{plot_b + 4:.1f}" '
            'stroke="#888888"/>'
            f'<text x="{sx(t):.1f}" y="{plot_b + 16:.1f}" text-anchor="middle">{_fmt(t)}</text>'
        )
    for t in yticks:
        out.append(
            f'<line x1="{plot_l - 4:.1f}" y1="{sy(t):.1f}" x2="{plot_r:.1f}" y2="{sy(t):.1f}" '
            'stroke="#eeeeee"/>'
            f'<text x="{plot_l - 7:.1f}" y="{sy(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
        )
    out.append(
        f'<text x="{(plot_l + plot_r) / 2:.1f}" y="{plot_b + 34:.1f}" text-anchor="middle">'
        f"{escape(xlabel)}</text>"
        f'<text transform="translate({left + 14:.1f} {(plot_t + plot_b) / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{escape(ylabel)}</text>'
    )
    for s in series:
        colour = colours[s.name]
        if s.joined and len(s.points) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _ in s.points)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        for x, y, tip in s.points:
            cx, cy = sx(x), sy(y)
            tooltip = f"<title>{escape(tip)}</title>"
            if s.kind == "best":
                out.append(
                    f'<path class="point best" d="{_star(cx, cy, 11)}" fill="{colour}" '
                    f'stroke="#7a0000">{tooltip}</path>'
                )
            else:
                out.append(
                    f'<circle class="point" cx="{cx:.1f}" cy="{cy:.1f}" r="4.5" '
                    f'fill="{colour}">{tooltip}</circle>'
                )
    out.append("</g>")
    return "\n".join(out)


def _star(cx: float, cy: float, r: float) -> str:
    points = []
    for i in range(10):
        radius = r if i % 2 == 0 else r * 0.45
        angle = math.pi / 2 + i * math.pi / 5
        points.append(f"{cx + radius * math.cos(angle):.1f},{cy - radius * math.sin(angle):.1f}")
    return "M" + " L".join(points) + " Z"
