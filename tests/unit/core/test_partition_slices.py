"""Slices of a month (core/partitions.py): eight per month, never across one, the last from
the 28th in every month (February too), and partition names read back as their spans."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from core.partitions import (
    next_slice,
    slice_of,
    slice_partition_name,
    slices_between,
    span_of_partition,
)


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_a_moment_falls_in_the_slice_that_starts_at_or_before_it():
    assert slice_of(at(2026, 12, 6, 7, 30)) == at(2026, 12, 5)
    assert slice_of(at(2026, 12, 5)) == at(2026, 12, 5)
    assert slice_of(at(2026, 12, 4, 23, 59, 59)) == at(2026, 12, 1)
    assert slice_of(at(2026, 12, 31, 23)) == at(2026, 12, 28)
    # Taken in UTC: 01:00 on the 5th at +02:00 is still the 4th there.
    assert slice_of(datetime(2026, 12, 5, 1, tzinfo=timezone(timedelta(hours=2)))) == at(
        2026, 12, 1
    )


def test_the_last_slice_of_every_month_runs_from_the_28th_to_the_next_month():
    for year, month in ((2026, 2), (2028, 2), (2026, 4), (2026, 12)):
        first_of_next = at(year + month // 12, month % 12 + 1, 1)
        assert next_slice(at(year, month, 28)) == first_of_next
        assert slice_of(first_of_next - timedelta(microseconds=1)) == at(year, month, 28)


def test_a_months_slices_are_eight_and_cover_it_exactly():
    slices = slices_between(at(2027, 2, 1), at(2027, 3, 1))
    assert [s.day for s in slices] == [1, 5, 9, 13, 17, 21, 25, 28]
    assert [next_slice(s) for s in slices] == [*slices[1:], at(2027, 3, 1)]
    # Any [start, end) takes every slice it overlaps.
    assert slices_between(at(2026, 12, 6), at(2026, 12, 9, 0, 0, 1)) == [
        at(2026, 12, 5),
        at(2026, 12, 9),
    ]


def test_partition_names_read_back_as_their_spans():
    table = "billing_spendhold"
    name = slice_partition_name(table, at(2026, 12, 28))
    assert name == "billing_spendhold_p2026_12_28"
    assert span_of_partition(table, name) == (at(2026, 12, 28), at(2027, 1, 1))
    # A month's partition (made before slices) is the whole month.
    assert span_of_partition(table, "billing_spendhold_p2026_12") == (
        at(2026, 12, 1),
        at(2027, 1, 1),
    )
    for other in ("billing_spendhold_default", "billing_spendhold_p2026_12_02", "x_p2026_12_01"):
        assert span_of_partition(table, other) is None
