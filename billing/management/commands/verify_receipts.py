"""Check receipt chains: every account's in the store, or a JSON lines export of the API's."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from datetime import UTC, datetime, time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date, parse_datetime

from audit.management.commands.verify_audit import read_heads
from billing.archive_checks import (
    check_archive,
    check_continuity,
    continues_from,
    manifests_in,
    read_records,
)
from billing.chain_checks import ChainCheck, check_chain
from billing.receipt_keys import receipt_keys
from billing.receipt_ledger import ledger_accounts, reconcile_account
from billing.receipts import Problem
from billing.verification import check_stored_chain, stored_accounts


class Command(BaseCommand):
    help = (
        "Verify receipt chains: hashes, order, signatures, the chain's recorded head, and that"
        " each receipt's columns say what its body says; in the store, each chain reconciled"
        " with its wallet's ledger entries and balance. Reads the store (every account, or"
        " --account), or a JSON lines file of receipts as GET /api/receipts answers them"
        " (--file, with --public-key), or downloaded monthly archives (--archive, with"
        " --manifests and --public-key; with --file too, the export must continue the last"
        " archive). Exits 1 if anything is wrong."
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
            "--archive",
            action="append",
            default=[],
            help="A downloaded archive (GET /api/receipts/archives/{period}); repeat for"
            " several: each must continue the one before it.",
        )
        parser.add_argument(
            "--manifests",
            help="The archives' signed manifests (GET /api/receipts/archives, saved as JSON);"
            " default: archives.json beside the first --archive.",
        )
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
        if options["archive"]:
            checks = self._check_archives(options)
        elif options["file"]:
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

    def _check_archives(self, options: dict) -> list[ChainCheck]:
        """Downloaded archives, offline: each against its signed manifest, in chain order,
        each continuing the one before; an export given with them must continue the last."""
        if options["head"]:
            raise CommandError("--head goes with the store.")
        paths = [Path(p) for p in options["archive"]]
        listing = Path(options["manifests"] or paths[0].parent / "archives.json")
        if not listing.is_file():
            raise CommandError(f"No manifests: {listing} (GET /api/receipts/archives, saved).")
        try:
            documents = manifests_in(json.loads(listing.read_text()))
        except ValueError:
            raise CommandError(f"{listing}: not JSON.") from None
        by_digest = {str(d.get("sha256")): d for d in documents}
        given = [(path, _read(path)) for path in paths]
        checks: dict[int, ChainCheck] = {}
        matched: list[dict] = []
        for path, data in given:
            document = by_digest.get(hashlib.sha256(data).hexdigest())
            if document is None:
                # Named by the manifest of its file name's month, if any: changed or swapped.
                check = checks.setdefault(0, ChainCheck(account_id=0))
                check.problems.append(
                    Problem(None, f"{path}: its SHA-256 is in no manifest (changed or swapped)")
                )
                continue
            if document in matched:
                raise CommandError(f"{path}: the archive {document.get('period')} given twice.")
            matched.append(document)
            account = int(document.get("account_id") or 0)
            keys = _public_keys(
                options["public_key"],
                [r.get("key_id") for r in _records(data)] + [document.get("key_id")],
            )
            check = checks.setdefault(account, ChainCheck(account_id=account))
            check.problems += check_archive(data, document, keys)
            check.receipts += int(document.get("receipts") or 0)
        for account, check in checks.items():
            own = sorted(
                (d for d in matched if d.get("account_id") == account),
                key=lambda d: int(d.get("first_seq") or 0),
            )
            check.problems += check_continuity(own, from_genesis=False)
            if own:
                check.head_seq, check.head_key_id = own[-1]["last_seq"], own[-1]["key_id"]
        if options["file"]:
            for check in self._check_file(Path(options["file"]), options["public_key"]):
                own = [d for d in matched if d.get("account_id") == check.account_id]
                first = _first_record(Path(options["file"]), check.account_id)
                if own:
                    last = max(own, key=lambda d: int(d.get("last_seq") or 0))
                    check.problems += continues_from(last, first)
                merged = checks.setdefault(check.account_id, check)
                if merged is not check:
                    merged.problems += check.problems
                    merged.receipts += check.receipts
                    merged.head_seq, merged.head_key_id = check.head_seq, check.head_key_id
        for check in checks.values():
            check.problems.sort(key=lambda p: p.seq or 0)
        return list(checks.values())

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
        public_keys = _public_keys(
            given, [r.get("key_id") for records in by_account.values() for r in records]
        )
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


def _public_keys(given: list[str], key_ids: list) -> dict[str, str]:
    """The keys given as `KEY_ID:KEY` or `KEY` (then for every key id met), else this
    deployment's own."""
    if not given:
        return receipt_keys().public()
    named = dict(k.split(":", 1) for k in given if ":" in k)
    anyone = [k for k in given if ":" not in k]
    return {**{k: anyone[-1] for k in set(key_ids) if k and anyone}, **named}


def _read(path: Path) -> bytes:
    if not path.is_file():
        raise CommandError(f"No such file: {path}")
    return path.read_bytes()


def _records(data: bytes) -> list[dict]:
    try:
        return read_records(data)
    except ValueError:
        return []  # check_archive names it


def _first_record(path: Path, account_id: int) -> dict | None:
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            if record.get("account_id") == account_id:
                return record
    return None
