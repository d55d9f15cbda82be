"""Recompute the usage rollups (hourly and daily) from the usage rows: all, or a range of days."""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from django.core.management.base import BaseCommand

from usage.rollups import rebuild_rollups


def _day(value: str) -> datetime:
    return datetime.combine(date.fromisoformat(value), time(), tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Recompute the usage rollups (hourly, daily) of the UTC days [--from, --to) from the rows."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--from", dest="start", type=_day, help="first day, YYYY-MM-DD")
        parser.add_argument("--to", dest="end", type=_day, help="day after the last, YYYY-MM-DD")

    def handle(self, *args, start: datetime | None, end: datetime | None, **options) -> None:
        written = rebuild_rollups(start=start, end=end)
        self.stdout.write(f"{written} hourly rollup rows written")
