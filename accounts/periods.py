"""Budget period boundaries: a day or a calendar month in an account's time zone.

A period starts at local midnight (the first of the month for a monthly one) and ends at the
next one; both are returned as UTC instants, which is what the database stores and compares.
Daylight saving moves the UTC offset, so a local day lasts 23, 24 or 25 hours: the arithmetic
is done on local calendar dates, never by adding 24 hours. A local midnight that does not
exist (a zone that springs forward at 00:00) resolves to the instant the day begins.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, available_timezones

DAILY = "daily"
MONTHLY = "monthly"
NONE = "none"


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    return frozenset(available_timezones()) | {"UTC"}


def valid_time_zone(name: str) -> bool:
    """Return whether `name` is an IANA time zone this system knows."""
    return isinstance(name, str) and name in _zones()


def _midnight(day: date, zone: ZoneInfo) -> datetime:
    """The first instant of a local calendar day, in UTC."""
    # A midnight in a gap is read with the offset before the jump: it lands on the jump.
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


def period_bounds(period: str, tz_name: str, now: datetime) -> tuple[datetime, datetime]:
    """Return the UTC start and end of the `period` ("daily" / "monthly") containing `now`."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    zone = ZoneInfo(tz_name)
    today = now.astimezone(zone).date()
    if period == DAILY:
        first, following = today, today + timedelta(days=1)
    elif period == MONTHLY:
        first = today.replace(day=1)
        following = (
            date(first.year + 1, 1, 1)
            if first.month == 12
            else date(first.year, first.month + 1, 1)
        )
    else:
        raise ValueError(f"a {period!r} budget has no period bounds")
    return _midnight(first, zone), _midnight(following, zone)


def period_key(period: str, tz_name: str, now: datetime) -> str:
    """Name the `period` containing `now` in the time zone: "2026-12-06" (daily), "2026-12"
    (monthly), or "all" for a budget that never resets (billing.models.TagSpend's period)."""
    if period == NONE:
        return "all"
    today = now.astimezone(ZoneInfo(tz_name)).date()
    return today.isoformat() if period == DAILY else today.isoformat()[:7]
