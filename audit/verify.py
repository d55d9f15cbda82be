"""Check the stored chains: every entry's hash, and each chain's head (a removed tail)."""

from __future__ import annotations

from collections.abc import Iterator

from audit.chain import Verdict, verify
from audit.models import AuditChain, AuditEntry
from audit.services import OPERATOR_CHAIN


def _records(account_id: int | None) -> Iterator[dict]:
    entries = AuditEntry.objects.filter(account_id=account_id).order_by("seq")
    for entry in entries.iterator(chunk_size=2000):
        yield entry.as_record()


def chain_verdict(head: AuditChain) -> Verdict:
    """Check one stored chain against its head: intact, and as long as the head says."""
    account_id = None if head.chain == OPERATOR_CHAIN else head.chain
    verdict = verify(_records(account_id))
    if not verdict.ok:
        return verdict
    if verdict.checked != head.last_seq:
        return Verdict(
            False,
            verdict.checked,
            f"the head says {head.last_seq} entries, {verdict.checked} are stored",
        )
    last = AuditEntry.objects.filter(account_id=account_id).order_by("-seq").first()
    if head.last_seq and (last is None or last.hash != head.last_hash):
        return Verdict(False, verdict.checked, "the last entry is not the one the head names")
    return verdict


def stored_verdicts(account_id: int | None = None) -> dict[int | None, Verdict]:
    """Check every stored chain (or one account's): {account id or None: verdict}."""
    heads = AuditChain.objects.order_by("chain")
    if account_id is not None:
        heads = heads.filter(chain=account_id)
    return {
        (None if head.chain == OPERATOR_CHAIN else head.chain): chain_verdict(head)
        for head in heads
    }
