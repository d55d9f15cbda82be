"""Budget period bounds: local calendar days and months, returned as UTC instants."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounts.periods import period_bounds, valid_time_zone


def utc(*args) -> datetime:
    return datetime(*args).replace(tzinfo=UTC)


def test_a_utc_day_runs_from_midnight_to_midnight():
    assert period_bounds("daily", "UTC", utc(2026, 12, 1, 18, 30)) == (
        utc(2026, 12, 1),
        utc(2026, 12, 2),
    )


def test_the_boundary_instant_belongs_to_the_next_period():
    assert period_bounds("daily", "UTC", utc(2026, 12, 2)) == (utc(2026, 12, 2), utc(2026, 12, 3))
    assert period_bounds("monthly", "UTC", utc(2027, 1, 1)) == (utc(2027, 1, 1), utc(2027, 2, 1))


def test_a_day_in_a_zone_ahead_of_utc_starts_the_evening_before_in_utc():
    # 23:30 UTC on Nov 30 is already Dec 1 in Berlin (UTC+1 in winter).
    assert period_bounds("daily", "Europe/Berlin", utc(2026, 11, 30, 23, 30)) == (
        utc(2026, 11, 30, 23),
        utc(2026, 12, 1, 23),
    )


def test_a_day_in_a_zone_behind_utc_is_still_yesterday_there():
    # 03:00 UTC on Dec 1 is 22:00 on Nov 30 in New York (UTC-5).
    assert period_bounds("daily", "America/New_York", utc(2026, 12, 1, 3)) == (
        utc(2026, 11, 30, 5),
        utc(2026, 12, 1, 5),
    )


def test_the_spring_forward_day_lasts_23_hours():
    start, end = period_bounds("daily", "Europe/Berlin", utc(2026, 3, 29, 12))
    assert (start, end) == (utc(2026, 3, 28, 23), utc(2026, 3, 29, 22))
    assert (end - start).total_seconds() == 23 * 3600


def test_the_fall_back_day_lasts_25_hours():
    start, end = period_bounds("daily", "Europe/Berlin", utc(2026, 10, 25, 12))
    assert (start, end) == (utc(2026, 10, 24, 22), utc(2026, 10, 25, 23))
    assert (end - start).total_seconds() == 25 * 3600


def test_a_midnight_skipped_by_dst_starts_the_day_at_the_jump():
    # Santiago springs forward at 00:00 (UTC-4 -> UTC-3) on 2026-09-06: the day starts at
    # 04:00 UTC, which reads 01:00 there.
    start, end = period_bounds("daily", "America/Santiago", utc(2026, 9, 6, 12))
    assert (start, end) == (utc(2026, 9, 6, 4), utc(2026, 9, 7, 3))


def test_a_month_in_a_non_utc_zone_spans_its_dst_change():
    # March in Berlin: starts at UTC+1, ends at UTC+2.
    assert period_bounds("monthly", "Europe/Berlin", utc(2026, 3, 15)) == (
        utc(2026, 2, 28, 23),
        utc(2026, 3, 31, 22),
    )


def test_december_ends_on_the_first_of_next_year():
    assert period_bounds("monthly", "Asia/Tokyo", utc(2026, 12, 31, 14, 59)) == (
        utc(2026, 11, 30, 15),
        utc(2026, 12, 31, 15),
    )
    # One second later it is 2027-01-01 00:00 in Tokyo: the next month.
    assert period_bounds("monthly", "Asia/Tokyo", utc(2026, 12, 31, 15)) == (
        utc(2026, 12, 31, 15),
        utc(2027, 1, 31, 15),
    )


def test_a_leap_february_has_29_days():
    start, end = period_bounds("monthly", "UTC", utc(2028, 2, 10))
    assert (start, end) == (utc(2028, 2, 1), utc(2028, 3, 1))
    assert (end - start).days == 29


def test_a_budget_without_a_period_has_no_bounds():
    with pytest.raises(ValueError):
        period_bounds("none", "UTC", utc(2026, 12, 1))


def test_a_naive_now_is_refused():
    with pytest.raises(ValueError):
        period_bounds("daily", "UTC", datetime(2026, 12, 1))


def test_only_iana_zone_names_are_valid():
    assert valid_time_zone("UTC") and valid_time_zone("Europe/Berlin")
    assert not valid_time_zone("Mars/Olympus") and not valid_time_zone("")
    assert not valid_time_zone(" UTC") and not valid_time_zone(None)
