"""Clear sign-in lockouts (accounts/throttle.py): of account names, client addresses, or all."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from accounts import throttle, throttle_stores, throttle_subjects


class Command(BaseCommand):
    help = (
        "Clear sign-in lockouts and failure counts: of an account name (--username), of a "
        "client address (--address, its sign-ins and tenant tokens), or all of them (--all)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--username", action="append", default=[], metavar="NAME")
        parser.add_argument("--address", action="append", default=[], metavar="IP")
        parser.add_argument(
            "--all", action="store_true", dest="everything", help="every name and address"
        )

    def handle(self, *args, username, address, everything, **options):
        if not (username or address or everything):
            raise CommandError("Say what to unlock: --username NAME, --address IP or --all.")
        if not settings.REDIS_URL:
            raise CommandError(
                "REDIS_URL is unset: lockouts live in the server process's memory; "
                "restart it to clear them, or use the User admin's action."
            )
        subjects = []
        for raw in address:
            subject = throttle_subjects.address_subject(raw)
            if subject == throttle_subjects.UNKNOWN_ADDRESS and raw.strip() != subject:
                raise CommandError(f"Not an IP address: {raw!r}")
            subjects.append(subject)
        gate = throttle.default
        try:
            if everything:
                self._report("all names and addresses", gate.unlock_all())
                return
            for name in username:
                self._report(f"account name {name!r}", gate.unlock_name(name))
            for subject in subjects:
                self._report(f"address {subject}", gate.unlock_address(subject))
        except throttle.StoreDown as exc:
            raise CommandError(f"Nothing cleared: {exc}.") from None

    def _report(self, what: str, cleared: list[throttle_stores.Cleared]) -> None:
        if not cleared:
            self.stdout.write(f"{what}: nothing to clear")
            return
        self.stdout.write(f"{what}: cleared {len(cleared)} record(s)")
        for record in cleared:
            self.stdout.write(f"  {record.describe()}")
