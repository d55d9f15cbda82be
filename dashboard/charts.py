"""Bar charts as server-rendered SVG: no JavaScript, nothing vendored, readable in tests.

Why SVG from the server: the figures are already exact integers in the view; drawing them
as rects needs a few lines, works without scripts, and each bar carries its label and value
(`<title>`, `data-value`) for screen readers and for the browser tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH = 640
HEIGHT = 180
AXIS_BOTTOM = 24  # room for the labels under the bars
GAP = 4
MAX_BAR_W = 48


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    tick: str | None = None  # the label under the bar, if shorter than `label`


def bar_chart(
    bars: Sequence[Bar], *, title: str, fmt: Callable[[int], str] = str, name: str = ""
) -> SafeString:
    """Return an SVG bar chart of `bars` (values >= 0), scaled to the largest."""
    if not bars:
        return format_html('<p class="empty" data-chart="{}">No data yet.</p>', name)
    top = max(bar.value for bar in bars) or 1
    plot_h = HEIGHT - AXIS_BOTTOM
    slot = WIDTH / len(bars)
    bar_w = max(1.0, min(slot - GAP, MAX_BAR_W))
    label_every = max(1, len(bars) // 10)
    rects = []
    for i, bar in enumerate(bars):
        h = round(plot_h * bar.value / top, 1)
        x = round(i * slot + (slot - bar_w) / 2, 1)
        label = (bar.tick or bar.label) if i % label_every == 0 else ""
        rects.append(
            (
                x,
                plot_h - h,
                bar_w,
                h,
                bar.label,
                bar.value,
                bar.label,
                fmt(bar.value),
                x + bar_w / 2,
                HEIGHT - 8,
                label,
            )
        )
    body = format_html_join(
        "",
        '<g class="bar"><rect x="{}" y="{}" width="{}" height="{}" data-label="{}"'
        ' data-value="{}"><title>{}: {}</title></rect>'
        '<text x="{}" y="{}" text-anchor="middle" font-size="10">{}</text></g>',
        rects,
    )
    return format_html(
        '<figure class="chart"><figcaption>{} <span class="max">max {}</span></figcaption>'
        '<svg role="img" aria-label="{}" data-chart="{}" viewBox="0 0 {} {}"'
        ">{}</svg></figure>",
        title,
        fmt(top),
        title,
        name,
        WIDTH,
        HEIGHT,
        body,
    )
