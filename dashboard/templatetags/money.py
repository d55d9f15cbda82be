"""Template filters for money and sizes, exact: integers in, no float rounding."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def usd(micro: int | None) -> str:
    """Format micro-USD as dollars with all six decimals: 2520 -> "$0.002520"."""
    if micro is None:
        return "–"
    sign = "-" if micro < 0 else ""
    dollars, rest = divmod(abs(int(micro)), 1_000_000)
    return f"{sign}${dollars:,}.{rest:06d}"


@register.filter
def count(value: int | None) -> str:
    """Format a count with thousands separators."""
    return "–" if value is None else f"{int(value):,}"


@register.filter
def percent_of(part: int, whole: int | None) -> str:
    """Return part as a whole percentage of whole (rounded down), or "" without a whole."""
    if not whole:
        return ""
    return f"{int(part) * 100 // int(whole)}%"
