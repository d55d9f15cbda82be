"""Create the usage log's monthly partitions (PostgreSQL) from a day's month through months
ahead: before loading rows of past months, or when beat has not run for a while."""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from django.core.management.base import BaseCommand

from usage.partitions import MONTHS_AHEAD, ensure_months_ahead, is_partitioned


def _day(value: str) -> datetime:
    return datetime.combine(date.fromisoformat(value), time(), tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Create the usage log's monthly partitions from --from's month (this"
        " month's by default) through --months-ahead months after this one."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--from", dest="start", type=_day, help="a day of the first month")
        parser.add_argument(
            "--months-ahead",
            type=int,
            default=MONTHS_AHEAD,
            help=f"months after this one to create (default {MONTHS_AHEAD})",
        )

    def handle(self, *args, start: datetime | None, months_ahead: int, **options) -> None:
        if not is_partitioned():
            self.stdout.write("the usage log is not partitioned here (SQLite): nothing to do")
            return
        created = ensure_months_ahead(start=start, months_ahead=max(0, months_ahead))
        self.stdout.write(f"created {', '.join(created)}" if created else "all there already")
