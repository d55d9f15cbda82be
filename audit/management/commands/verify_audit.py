"""Check the audit trail's hash chains: the stored ones, or an exported JSON lines file."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit.chain import Verdict, verify_chains
from audit.verify import stored_verdicts


class Command(BaseCommand):
    help = (
        "Verify the audit trail's hash chains (each account's, and the operator-wide one): "
        "stored in the database, or in a JSON lines export (--jsonl FILE). Exits 1 if broken."
    )

    def add_arguments(self, parser):
        parser.add_argument("--account", type=int, help="Only this account's chain.")
        parser.add_argument("--jsonl", help="An export to check instead (every line, unfiltered).")

    def handle(self, *args, **options):
        if options["jsonl"]:
            path = Path(options["jsonl"])
            if not path.is_file():
                raise CommandError(f"No such file: {path}")
            lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            verdicts = verify_chains(lines)
            if options["account"] is not None:
                verdicts = {k: v for k, v in verdicts.items() if k == options["account"]}
        else:
            verdicts = stored_verdicts(options["account"])
        broken = 0
        for account, verdict in verdicts.items():
            self.stdout.write(self._line(account, verdict))
            broken += not verdict.ok
        if broken:
            raise CommandError(f"{broken} chain(s) broken.")
        self.stdout.write(f"{len(verdicts)} chain(s) intact.")

    @staticmethod
    def _line(account: int | None, verdict: Verdict) -> str:
        name = "operator-wide" if account is None else f"account {account}"
        if verdict.ok:
            return f"{name}: {verdict.checked} entries, intact"
        return f"{name}: BROKEN after {verdict.checked} entries: {verdict.problem}"
