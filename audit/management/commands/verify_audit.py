"""Check the audit trail's hash chains and signed heads: the stored ones, or an export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.chain import Verdict, verify_chains
from audit.heads import check_kept_head
from audit.services import OPERATOR_CHAIN
from audit.verify import stored_verdicts
from core.signing import receipt_keys


def read_heads(paths: list[str]) -> list[dict[str, Any]]:
    """Signed heads from files: each one JSON object (as GET /api/audit/head answers) or
    JSON lines of them."""
    heads: list[dict[str, Any]] = []
    for name in paths:
        path = Path(name)
        if not path.is_file():
            raise CommandError(f"No such file: {path}")
        text = path.read_text().strip()
        try:
            parsed = json.loads(text)
            heads += parsed if isinstance(parsed, list) else [parsed]
        except ValueError:
            try:
                heads += [json.loads(line) for line in text.splitlines() if line.strip()]
            except ValueError:
                raise CommandError(f"{path}: not a signed head as the API answers one.") from None
    return heads


class Command(BaseCommand):
    help = (
        "Verify the audit trail's hash chains (each account's, and the operator-wide one) and"
        " their signed heads: stored in the database, or in a JSON lines export (--jsonl FILE)."
        " --head FILE holds the chain against a signed head kept earlier (GET /api/audit/head):"
        " a rewrite, cut or rollback of what it covers shows. Exits 1 if broken."
    )

    def add_arguments(self, parser):
        parser.add_argument("--account", type=int, help="Only this account's chain.")
        parser.add_argument("--jsonl", help="An export to check instead (every line, unfiltered).")
        parser.add_argument(
            "--head",
            action="append",
            default=[],
            help="A signed head kept earlier (a JSON file, or JSON lines of several).",
        )

    def handle(self, *args, **options):
        kept = read_heads(options["head"])
        if options["jsonl"]:
            path = Path(options["jsonl"])
            if not path.is_file():
                raise CommandError(f"No such file: {path}")
            lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            verdicts = _with_heads(verify_chains(lines), lines, kept)
            if options["account"] is not None:
                verdicts = {k: v for k, v in verdicts.items() if k == options["account"]}
        else:
            verdicts = stored_verdicts(options["account"], kept)
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


def _with_heads(
    verdicts: dict[int | None, Verdict], lines: list[dict], kept: list[dict]
) -> dict[int | None, Verdict]:
    """Hold an export's chains against the kept heads (the export must reach each head)."""
    public_keys = receipt_keys().public()
    for head in kept:
        chain = head.get("account_id")
        account = None if chain == OPERATOR_CHAIN else chain
        verdict = verdicts.get(account, Verdict(True, 0))
        if not verdict.ok:
            continue
        hashes: dict[int, str] = {
            int(line["seq"]): str(line.get("hash"))
            for line in lines
            if line.get("account") == account and isinstance(line.get("seq"), int)
        }
        problems = check_kept_head(
            head,
            public_keys=public_keys,
            hash_at_seq=hashes.get(int(head.get("seq") or 0)),
            last_seq=max(hashes, default=0),
        )
        if problems:
            verdicts[account] = Verdict(
                False, verdict.checked, f"signed head at seq {head.get('seq')}: {problems[0]}"
            )
    return verdicts
