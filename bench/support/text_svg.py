"""A terminal screen as an SVG picture (pure): ``make demo``'s last screen for the docs.

Plain text in a monospace font on a dark terminal background, one ``<text>`` row per line,
spaces kept (``xml:space="preserve"``), the markup characters escaped. Rows wider than
``cols`` are cut with a ``…`` mark: the picture is what a ``cols``-wide terminal shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

CHAR_W, LINE_H, PAD = 8.4, 17, 14  # px: a 14 px monospace cell, and the margin
BACKGROUND, FOREGROUND, ACCENT = "#1e1e2e", "#d9dce6", "#f5a97f"


def text_svg(lines: Sequence[str], *, cols: int = 100, title: str = "") -> str:
    """The SVG document for ``lines`` at ``cols`` columns (``title``: its <title>)."""
    rows = [line if len(line) <= cols else line[: cols - 1] + "…" for line in lines]
    width = round(cols * CHAR_W + 2 * PAD)
    height = round(len(rows) * LINE_H + 2 * PAD)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans Mono, Menlo, Consolas, '
        f'monospace" font-size="14">',
        f"<title>{escape(title)}</title>" if title else "",
        f'<rect width="100%" height="100%" rx="6" fill="{BACKGROUND}"/>',
    ]
    for i, row in enumerate(rows):
        if not row.strip():
            continue
        y = PAD + (i + 1) * LINE_H - 4
        # the first line is the screen's heading: set apart as a terminal title would be
        fill = ACCENT if i == 0 else FOREGROUND
        out.append(f'<text x="{PAD}" y="{y}" fill="{fill}" xml:space="preserve">'
                   f"{escape(row)}</text>")  # fmt: skip
    out.append("</svg>")
    return "\n".join(x for x in out if x) + "\n"
