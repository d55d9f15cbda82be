"""The one loop over a chain's signed heads (audit/heads.py `check_signed_heads`), which both
verifiers run: the audit trail's (audit/verify.py) and the receipts' (billing/verification.py).

Heads this database kept come first, in seq order, then those given; each is held against
the stored chain. A head of another chain or account is handed back unchecked: verify_audit
calls it an error, verify_receipts (given every account's heads at once) passes over it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.chain import canonical
from audit.heads import check_signed_heads, document, head_body, sign
from audit.models import SignedHead
from audit.services import signed_audit_head
from audit.verify import stored_verdicts
from billing.receipts import signed_receipt_head
from billing.verification import check_stored_chain
from core.signing import receipt_keys
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db
RECEIPTS, AUDIT = SignedHead.Chain.RECEIPTS.value, SignedHead.Chain.AUDIT.value
HASHES = {1: "a" * 64, 2: "b" * 64, 3: "c" * 64}


def signed(*, chain: str, account_id: int, seq: int, hash: str) -> dict:
    """A head signed with the operator's key as a tenant holds it, not kept in the database."""
    keys = receipt_keys()
    body = head_body(
        chain=chain, account_id=account_id, seq=seq, hash=hash, signed_at=timezone.now()
    )
    return {
        **body,
        "key_id": keys.newest,
        "signature": keys.private[keys.newest].sign(canonical(body)).hex(),
    }


def test_kept_heads_in_seq_order_then_the_given_each_with_what_is_wrong():
    now = timezone.now()
    sign(chain=RECEIPTS, account_id=7, seq=2, hash=HASHES[2], now=now)
    sign(chain=RECEIPTS, account_id=7, seq=1, hash=HASHES[1], now=now + timedelta(seconds=1))
    sign(chain=AUDIT, account_id=7, seq=3, hash="d" * 64)  # another chain's: not read
    sign(chain=RECEIPTS, account_id=8, seq=1, hash="e" * 64)  # another account's: not read
    good = signed(chain=RECEIPTS, account_id=7, seq=3, hash=HASHES[3])
    forged = {**good, "seq": 2}
    given = [
        good,
        signed(chain=RECEIPTS, account_id=7, seq=2, hash="f" * 64),
        signed(chain=RECEIPTS, account_id=7, seq=5, hash="0" * 64),
        forged,
        signed(chain=AUDIT, account_id=7, seq=3, hash=HASHES[3]),
        signed(chain=RECEIPTS, account_id=8, seq=3, hash=HASHES[3]),
    ]
    asked: list[int] = []

    def hash_at(seq: int) -> str | None:
        asked.append(seq)
        return HASHES.get(seq)

    checked = list(
        check_signed_heads(
            chain=RECEIPTS,
            account_id=7,
            given=given,
            hash_at=hash_at,
            last_seq=3,
            public_keys=receipt_keys().public(),
        )
    )

    assert [(head["chain"], head["account_id"], head["seq"]) for head, _ in checked] == [
        (RECEIPTS, 7, 1),
        (RECEIPTS, 7, 2),
        (RECEIPTS, 7, 3),
        (RECEIPTS, 7, 2),
        (RECEIPTS, 7, 5),
        (RECEIPTS, 7, 2),
        (AUDIT, 7, 3),
        (RECEIPTS, 8, 3),
    ]
    assert [problems for _, problems in checked] == [
        [],
        [],
        [],
        ["seq 2 no longer carries the kept head's hash (rewritten at or before it)"],
        ["the chain ends at seq 3, before the kept head's seq 5 (cut or rolled back)"],
        ["the head's signature does not verify (changed or forged)"],
        None,
        None,
    ]
    assert asked == [1, 2, 3, 2, 5, 2]  # the stored hash is read for this chain's heads only


def test_verify_audit_refuses_another_chains_head_and_verify_receipts_passes_over_it():
    tenant = make_tenant()
    audit_head = document(signed_audit_head(tenant.account_id))
    receipts_head = document(signed_receipt_head(tenant.account_id))

    verdict = stored_verdicts(tenant.account_id, [receipts_head])[tenant.account_id]
    assert (verdict.ok, verdict.problem) == (False, "the head given is not of this chain")
    assert stored_verdicts(tenant.account_id, [audit_head])[tenant.account_id].ok

    public_keys = receipt_keys().public()
    check = check_stored_chain(tenant.account_id, public_keys, kept=[audit_head])
    assert check.problems == []
    tampered = {**receipts_head, "hash": "f" * 64}
    check = check_stored_chain(tenant.account_id, public_keys, kept=[audit_head, tampered])
    assert [p.what for p in check.problems] == [
        f"the head signed at {tampered['signed_at']}: the head's signature does not verify"
        " (changed or forged)"
    ]
