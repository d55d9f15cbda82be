"""Template filters for money and sizes, exact: integers in, no float rounding."""

from __future__ import annotations

from collections.abc import Iterable

from django import template

from core import money
from core.admin_views import dollars
from core.errors import REFUSAL_CODES

register = template.Library()


@register.filter
def usd(micro: int | None) -> str:
    """Micro-USD as dollars for people: cents, more digits only under a cent, and every digit
    in a tooltip where the cents round (core/money.py)."""
    return dollars(None if micro is None else int(micro))


@register.filter
def usd_at(micro: int | None, places: int | None) -> str:
    """Micro-USD as dollars at a precision amounts read together share (`finest_places`):
    a balance beside sub-cent amounts shows their digits, so it visibly moves by them."""
    return dollars(None if micro is None else int(micro), places)


@register.filter
def finest_places(rows: Iterable, attribute: str) -> int:
    """The precision of a column of amounts: the most decimals any row's `attribute` shows."""
    return money.finest_places(getattr(row, attribute) for row in rows)


@register.simple_tag
def places_of(*amounts: int | None) -> int:
    """The precision of amounts shown together, as `finest_places` for a few named ones."""
    return money.finest_places(amounts)


@register.filter
def refused(error_code: str | None) -> bool:
    """Whether a request ended in a gateway refusal: billed nothing, so listed as a refusal
    ("refused: LM-2001"), never as a $0.00 charge."""
    return error_code in REFUSAL_CODES


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


@register.filter
def hit_rate(rate: float | None) -> str:
    """A cache hit rate (a fraction) as a percentage to one decimal, or "–" without one."""
    return "–" if rate is None else f"{rate * 100:.1f}%"
