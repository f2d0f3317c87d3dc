"""The demo screen's SVG picture (bench/support/text_svg.py): valid XML, every row kept with
its spaces and escaped, in its place, cut to the terminal's width."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from bench.support.text_svg import CHAR_W, LINE_H, PAD, text_svg

NS = "{http://www.w3.org/2000/svg}"


def test_rows_are_kept_escaped_in_place_and_cut_at_the_width() -> None:
    lines = ["lagpilot demo  |  agents.perception", "", "  3  WARN   <- hot & late",
             "x" * 120]  # fmt: skip
    svg = text_svg(lines, cols=100, title="demo")
    root = ET.fromstring(svg)
    texts = list(root.iter(f"{NS}text"))
    assert [t.text for t in texts] == [lines[0], lines[2], "x" * 99 + "…"]
    ys = [float(t.get("y") or 0) for t in texts]
    assert ys[1] - ys[0] == 2 * LINE_H  # the blank row keeps its place
    assert root.get("width") == str(round(100 * CHAR_W + 2 * PAD))
    title = root.find(f"{NS}title")
    assert title is not None and title.text == "demo"
    assert "&lt;- hot &amp; late" in svg
