"""Template filters for money and sizes, exact: integers in, no float rounding."""

from __future__ import annotations

from django import template

from core.admin_views import dollars

register = template.Library()


@register.filter
def usd(micro: int | None) -> str:
    """Micro-USD as dollars for people: cents, more digits only under a cent, and every digit
    in a tooltip where the cents round (core/money.py)."""
    return dollars(None if micro is None else int(micro))


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
