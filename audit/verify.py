"""Check the stored chains: every entry's hash and link, every signed head kept here, and
heads a tenant kept (audit/heads.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from audit.chain import Verdict, verify
from audit.heads import check_signed_heads
from audit.models import AuditEntry, SignedHead
from audit.services import OPERATOR_CHAIN
from core.signing import receipt_keys


def _records(account_id: int | None) -> Iterator[dict]:
    entries = AuditEntry.objects.filter(account_id=account_id).order_by("seq")
    for entry in entries.iterator(chunk_size=2000):
        yield entry.as_record()


def chain_verdict(account_id: int | None, kept: Sequence[Mapping[str, Any]] = ()) -> Verdict:
    """Check one stored chain: intact on its own, and holding every signed head of it this
    database kept and every head given (`kept`, as a tenant downloaded them)."""
    verdict = verify(_records(account_id))
    if not verdict.ok:
        return verdict
    chain = OPERATOR_CHAIN if account_id is None else account_id
    entries = AuditEntry.objects.filter(account_id=account_id)
    for head, problems in check_signed_heads(
        chain=SignedHead.Chain.AUDIT,
        account_id=chain,
        given=kept,
        hash_at=lambda seq: entries.filter(seq=seq).values_list("hash", flat=True).first(),
        last_seq=verdict.checked,
        public_keys=receipt_keys().public(),
    ):
        if problems is None:
            return Verdict(False, verdict.checked, "the head given is not of this chain")
        if problems:
            return Verdict(
                False, verdict.checked, f"signed head at seq {head.get('seq')}: {problems[0]}"
            )
    return verdict


def stored_accounts() -> list[int | None]:
    """Every chain with an entry or a signed head: account ids, None for the operator's."""
    entries = set(AuditEntry.objects.values_list("account_id", flat=True).distinct())
    heads = SignedHead.objects.filter(chain=SignedHead.Chain.AUDIT)
    for chain in heads.values_list("account_id", flat=True).distinct():
        entries.add(None if chain == OPERATOR_CHAIN else chain)
    return sorted(entries, key=lambda account: -1 if account is None else account)


def stored_verdicts(
    account_id: int | None = None, kept: Sequence[Mapping[str, Any]] = ()
) -> dict[int | None, Verdict]:
    """Check every stored chain (or one account's): {account id or None: verdict}. A kept
    head is checked against its own account's chain."""
    accounts: list[int | None] = stored_accounts() if account_id is None else [account_id]
    for head in kept:
        chain = int(head.get("account_id") or 0)
        named = None if chain == OPERATOR_CHAIN else chain
        if named not in accounts and (account_id is None or named == account_id):
            accounts.append(named)
    verdicts = {}
    for account in accounts:
        chain = OPERATOR_CHAIN if account is None else account
        mine = [head for head in kept if head.get("account_id") == chain]
        verdicts[account] = chain_verdict(account, mine)
    return verdicts
