"""The SVG charts: well-formed XML with every label escaped, and axes that hold every point."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from phi_core.view import Series, scatter_svg
from phi_core.view._svg import nice_ticks

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(
    ("low", "high"),
    [(0.312, 0.721), (0.0, 1.0), (0.0, 0.0), (-3.5, 12.25), (1e-5, 2.4e-4), (5.0, 5.0)],
)
def test_ticks_are_ordered_and_cover_the_range(low: float, high: float) -> None:
    ticks = nice_ticks(low, high)
    assert ticks == sorted(ticks) and len(ticks) >= 2
    assert ticks[0] <= low and ticks[-1] >= high


def test_names_are_escaped_and_the_svg_holds_no_markup_from_them() -> None:
    hostile = '<script>alert("x")</script> & <b onmouseover="x()">'
    svg = scatter_svg(
        [("cost & <latency>", "accuracy", [Series(hostile, [(0.1, 0.5, hostile)], joined=True)])],
        title=f"Pareto of {hostile}",
        empty="nothing",
    )
    root = ET.fromstring(svg)  # well-formed despite the names
    tags = {element.tag.removeprefix(SVG) for element in root.iter()}
    assert tags <= {"svg", "title", "rect", "text", "g", "line", "circle", "polyline", "path"}
    assert "script" not in tags and "b" not in tags
    assert hostile in [t.text for t in root.iter(f"{SVG}title")]
    assert f"Pareto of {hostile}" in [t.text for t in root.iter(f"{SVG}text")]


def test_every_point_lies_inside_its_panel() -> None:
    points = [(0.001, 0.312, "a"), (0.004, 0.721, "b"), (0.0025, 0.5, "c")]
    svg = ET.fromstring(
        scatter_svg([("x", "y", [Series("s", points)])], title="t", empty="nothing")
    )
    (frame,) = [r for r in svg.iter(f"{SVG}rect") if r.get("fill") == "#fafafa"]
    left, top = float(frame.get("x", 0)), float(frame.get("y", 0))
    right, bottom = left + float(frame.get("width", 0)), top + float(frame.get("height", 0))
    dots = [c for c in svg.iter(f"{SVG}circle") if c.get("class") == "point"]
    assert len(dots) == 3
    for dot in dots:
        assert left <= float(dot.get("cx", -1)) <= right
        assert top <= float(dot.get("cy", -1)) <= bottom


def test_a_chart_without_points_says_why() -> None:
    svg = scatter_svg([("x", "y", [Series("s", [])])], title="t", empty="No combination ran.")
    assert "No combination ran." in [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
