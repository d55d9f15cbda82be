"""Check receipt chains: every account's in the store, or a JSON lines export of the API's."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime, time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date, parse_datetime

from audit.management.commands.verify_audit import read_heads
from billing.receipt_keys import receipt_keys
from billing.receipt_ledger import ledger_accounts, reconcile_account
from billing.statements import ChainCheck, check_chain, check_stored_chain, stored_accounts


class Command(BaseCommand):
    help = (
        "Verify receipt chains: hashes, order, signatures, the chain's recorded head, and that"
        " each receipt's columns say what its body says; in the store, each chain reconciled"
        " with its wallet's ledger entries and balance. Reads the store (every account, or"
        " --account), or a JSON lines file of receipts as GET /api/receipts answers them"
        " (--file, with --public-key). Exits 1 if anything is wrong."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--account", type=int, action="append", default=[], help="Only this account."
        )
        parser.add_argument(
            "--since",
            help="Only receipts settled from then on (ISO date or date-time; the first one's"
            " link back is taken on trust).",
        )
        parser.add_argument("--file", help="A JSON lines export to check instead of the store.")
        parser.add_argument(
            "--head",
            action="append",
            default=[],
            help="A signed head kept earlier (GET /api/receipts/head; a JSON file, or JSON lines"
            " of several): receipts cut off after it, a rollback or a rewrite show.",
        )
        parser.add_argument(
            "--public-key",
            action="append",
            default=[],
            help="A published key, base64url, as `KEY_ID:KEY` or just `KEY` (any key id);"
            " default: this deployment's own keys.",
        )

    def handle(self, *args, **options):
        public_keys = receipt_keys().public()
        if options["file"]:
            if options["head"]:
                raise CommandError("--head goes with the store; for a file, use the snippet.")
            checks = self._check_file(Path(options["file"]), options["public_key"])
            if options["account"]:
                checks = [c for c in checks if c.account_id in options["account"]]
        else:
            if options["public_key"]:
                raise CommandError("--public-key goes with --file: the store uses its own keys.")
            since = _moment(options["since"]) if options["since"] else None
            kept = read_heads(options["head"])
            accounts = set(stored_accounts(only=options["account"]))
            accounts |= {h["account_id"] for h in kept if not options["account"]}
            accounts |= set(ledger_accounts(only=options["account"]))
            checks = [
                check_stored_chain(account, public_keys, since=since, kept=kept)
                for account in sorted(accounts)
            ]
            for check in checks:  # and each chain against its wallet's ledger
                check.problems += reconcile_account(check.account_id, since=since)
        problems = 0
        for check in checks:
            for line in check.lines():
                self.stdout.write(line)
            problems += len(check.problems)
        if problems:
            broken = sum(not c.intact for c in checks)
            raise CommandError(f"{problems} problem(s) in {broken} of {len(checks)} chain(s).")
        self.stdout.write(f"{len(checks)} chain(s) intact.")

    @staticmethod
    def _check_file(path: Path, given: list[str]) -> list[ChainCheck]:
        if not path.is_file():
            raise CommandError(f"No such file: {path}")
        by_account: dict[int, list[dict]] = defaultdict(list)
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                account = record.get("account_id")
                if account is None:
                    account = json.loads(record["body"]).get("account_id")
            except (ValueError, KeyError, AttributeError):
                raise CommandError(
                    f"{path}:{number}: not a receipt as the API answers one."
                ) from None
            by_account[int(account)].append(record)
        if given:
            named = dict(k.split(":", 1) for k in given if ":" in k)
            anyone = [k for k in given if ":" not in k]
            key_ids = {r.get("key_id") for records in by_account.values() for r in records}
            public_keys = {**{k: anyone[-1] for k in key_ids if k and anyone}, **named}
        else:
            public_keys = receipt_keys().public()
        return [
            check_chain(account, records, public_keys) for account, records in by_account.items()
        ]


def _moment(text: str) -> datetime:
    moment = parse_datetime(text)
    if moment is None:
        day = parse_date(text)
        if day is None:
            raise CommandError(f"--since {text!r}: not an ISO date or date-time.")
        return datetime.combine(day, time(), tzinfo=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
