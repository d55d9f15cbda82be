"""Check the stored chains: every entry's hash and link, every signed head kept here, and
heads a tenant kept (audit/heads.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from audit.chain import Verdict, verify
from audit.heads import check_kept_head, document
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
    stored = SignedHead.objects.filter(chain=SignedHead.Chain.AUDIT, account_id=chain)
    heads = [document(head) for head in stored.order_by("seq")] + list(kept)
    public_keys = receipt_keys().public()
    for head in heads:
        if head.get("chain") != SignedHead.Chain.AUDIT or head.get("account_id") != chain:
            return Verdict(False, verdict.checked, "the head given is not of this chain")
        at = (
            AuditEntry.objects.filter(account_id=account_id, seq=int(head.get("seq") or 0))
            .values_list("hash", flat=True)
            .first()
        )
        problems = check_kept_head(
            head, public_keys=public_keys, hash_at_seq=at, last_seq=verdict.checked
        )
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
