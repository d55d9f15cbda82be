"""Check the stored receipt chains: each account's, from its archives (billing/archives.py)
through the store, against every signed head of it (audit/heads.py), what
`manage.py verify_receipts` runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from audit import heads
from audit.models import SignedHead
from billing import archive_checks, archives
from billing.chain_checks import ChainCheck, check_chain
from billing.models import Receipt
from billing.receipts import Problem, receipt_head
from billing.statements import CHUNK, last_before, receipt_record, seq_of


def stored_records(account_id: int, *, since: datetime | None = None) -> Iterator[dict[str, Any]]:
    """Yield an account's stored receipts in chain order as check_chain reads them: what a
    verifier gets (receipt_record) plus the columns only the store has."""
    receipts = Receipt.objects.filter(account_id=account_id)
    if since is not None:
        receipts = receipts.filter(seq__gt=seq_of(last_before(account_id, since)))
    after: int | None = None
    while True:
        chunk = receipts if after is None else receipts.filter(seq__gt=after)
        rows = list(chunk.order_by("seq")[:CHUNK])
        for r in rows:
            yield {
                **receipt_record(r),
                "group_id": r.group_id,
                "api_key_id": r.api_key_id,
                "cost_micro": r.cost_micro,
                "bandwidth_micro": r.bandwidth_micro,
            }
        if len(rows) < CHUNK:
            return
        after = rows[-1].seq


def stored_accounts(*, only: Sequence[int] = ()) -> list[int]:
    """Return the accounts with receipts or a signed head of their chain, `only` those if given."""
    signed = SignedHead.objects.filter(chain=SignedHead.Chain.RECEIPTS)
    receipts = Receipt.objects.all()
    if only:
        signed, receipts = signed.filter(account_id__in=only), receipts.filter(account_id__in=only)
    ids = set(signed.values_list("account_id", flat=True).distinct())
    ids |= set(receipts.values_list("account_id", flat=True).distinct())
    return sorted(ids)


def check_stored_chain(
    account_id: int,
    public_keys: Mapping[str, str],
    *,
    since: datetime | None = None,
    kept: Sequence[Mapping[str, Any]] = (),
) -> ChainCheck:
    """Check an account's chain as the store holds it, and against every signed head of it:
    those this database kept and those given (`kept`, as the tenant downloaded them), so a
    tail cut, a rollback or a rewrite by whoever owns the database shows to a head's holder.

    Once months are archived (billing/archives.py), the chain starts in the archive store:
    its archives must follow on from the chain's start, each file hold what its signed
    manifest says, and the stored chain continue the last archive."""
    archived = archives.archives_of(account_id) if since is None else []
    check = check_chain(
        account_id,
        stored_records(account_id, since=since),
        public_keys,
        from_genesis=since is None and not archived,
    )
    if archived:
        check.problems += archive_checks.check_stored_archives(account_id, public_keys)
        first = Receipt.objects.filter(account_id=account_id).order_by("seq").first()
        check.problems += archive_checks.continues_from(
            archives.manifest(archived[-1]), None if first is None else receipt_record(first)
        )
    stored = Receipt.objects.filter(account_id=account_id)

    def hash_at(seq: int) -> str | None:
        found = stored.filter(seq=seq).values_list("hash", flat=True).first()
        if found is None and archived:
            return archive_checks.archived_hash(account_id, seq)
        return found

    for head, problems in heads.check_signed_heads(
        chain=SignedHead.Chain.RECEIPTS,
        account_id=account_id,
        given=kept,
        hash_at=hash_at,
        last_seq=receipt_head(account_id)[0],
        public_keys=public_keys,
    ):
        # Every account's check is given every head kept: another's is not this one's concern.
        check.problems += [
            Problem(head.get("seq"), f"the head signed at {head.get('signed_at')}: {p}")
            for p in problems or ()
        ]
    return check
