"""Signed chain heads: the audit trail's and the receipts' last (seq, hash), signed with the
operator's key (core/signing.py) and handed to the tenant.

A hash chain alone proves nothing to whoever can rewrite the database: an owner of the
tables may edit an entry and re-hash everything after it, or cut the tail. A head signed
at a moment and kept by the tenant (the API and the dashboard hand them out; every statement
carries them) pins what the chain said then: the entry at the head's seq must still carry
the head's hash, and the chain must still reach it. `check_kept_head` is that test, and a pure
function, so a tenant runs it on an export without Tollgate.

Appends never update a head row (the application's database role may not; core/db_roles.py):
a chain's head is its last entry, and appends to one chain are serialised by a transaction
lock on PostgreSQL (`lock_sql`); SQLite has one writer at a time anyway.

What is signed: the canonical JSON (sorted keys, no spaces, UTF-8) of
`{"v", "chain", "account_id", "seq", "hash", "signed_at"}`; the signature is Ed25519 over
those bytes, hex, with the key's id.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.utils import timezone

from audit.chain import canonical
from audit.models import SignedHead, iso
from core.signing import receipt_keys

VERSION = 1
SIGNED_FIELDS = ("v", "chain", "account_id", "seq", "hash", "signed_at")
# pg_advisory_xact_lock's first key per chain ("aud1", "rct1"); the second is the account.
LOCK_SPACE: dict[str, int] = {
    SignedHead.Chain.AUDIT.value: 0x61756431,
    SignedHead.Chain.RECEIPTS.value: 0x72637431,
}
INT4 = 2**31 - 1


def lock_sql(chain: str, accounts_sql: str) -> str:
    """A statement (PostgreSQL) taking the append lock of each account a subquery names, in
    account order so two batches never wait on each other crosswise."""
    return (
        f"WITH wanted (a) AS ({accounts_sql})"
        f" SELECT count(pg_advisory_xact_lock({LOCK_SPACE[chain]}, mod(s.a, {INT4})::int))"
        " FROM (SELECT a FROM wanted ORDER BY a) AS s"
    )


def head_body(*, chain: str, account_id: int, seq: int, hash: str, signed_at: datetime) -> dict:
    return {
        "v": VERSION,
        "chain": chain,
        "account_id": account_id,
        "seq": seq,
        "hash": hash,
        "signed_at": iso(signed_at),
    }


def sign(
    *, chain: str, account_id: int, seq: int, hash: str, now: datetime | None = None
) -> SignedHead:
    """Sign a chain's head as it is now and keep the signature (append-only)."""
    keys = receipt_keys()
    signed_at = now or timezone.now()
    body = head_body(chain=chain, account_id=account_id, seq=seq, hash=hash, signed_at=signed_at)
    signature = keys.private[keys.newest].sign(canonical(body)).hex()
    return SignedHead.objects.create(
        chain=chain,
        account_id=account_id,
        seq=seq,
        hash=hash,
        signed_at=signed_at,
        key_id=keys.newest,
        signature=signature,
    )


def latest_or_sign(*, chain: str, account_id: int, seq: int, hash: str) -> SignedHead:
    """The newest signed head of a chain if it is still the head, else a new signature: asking
    again and again signs once per change."""
    newest = (
        SignedHead.objects.filter(chain=chain, account_id=account_id)
        .order_by("-seq", "-id")
        .first()
    )
    if newest is not None and newest.seq == seq and newest.hash == hash:
        return newest
    return sign(chain=chain, account_id=account_id, seq=seq, hash=hash)


def document(head: SignedHead) -> dict[str, Any]:
    """What a tenant keeps: the signed fields, the key's id and the signature."""
    body = head_body(
        chain=head.chain,
        account_id=head.account_id,
        seq=head.seq,
        hash=head.hash,
        signed_at=head.signed_at,
    )
    return {**body, "key_id": head.key_id, "signature": head.signature}


def signature_problems(kept: Mapping[str, Any], public_keys: Mapping[str, str]) -> list[str]:
    """What is wrong with a kept head's signature (nothing: it is the operator's)."""
    missing = [name for name in (*SIGNED_FIELDS, "key_id", "signature") if name not in kept]
    if missing:
        return [f"the head lacks {', '.join(missing)}"]
    encoded = public_keys.get(str(kept["key_id"]))
    if encoded is None:
        return [f"the head is signed with an unknown key {kept['key_id']!r}"]
    raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    body = {name: kept[name] for name in SIGNED_FIELDS}
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(
            bytes.fromhex(str(kept["signature"])), canonical(body)
        )
    except (InvalidSignature, ValueError):
        return ["the head's signature does not verify (changed or forged)"]
    return []


def check_kept_head(
    kept: Mapping[str, Any],
    *,
    public_keys: Mapping[str, str],
    hash_at_seq: str | None,
    last_seq: int,
) -> list[str]:
    """Hold a chain, as stored now, against a head the tenant kept; return what is wrong.

    `hash_at_seq`: the stored entry's hash at the kept head's seq (None: no such entry);
    `last_seq`: the stored chain's last seq. The chain itself must verify on its own (its
    hashes, seqs and links): together, an entry at or before the head that was edited and
    re-hashed, a tail cut before the head or a chain rolled back to an earlier state all show.
    """
    problems = signature_problems(kept, public_keys)
    if problems:
        return problems
    seq, expected = int(kept["seq"]), str(kept["hash"])
    if seq == 0:
        return []
    if last_seq < seq:
        return [
            f"the chain ends at seq {last_seq}, before the kept head's seq {seq}"
            " (cut or rolled back)"
        ]
    if hash_at_seq != expected:
        return [f"seq {seq} no longer carries the kept head's hash (rewritten at or before it)"]
    return []


def check_signed_heads(
    *,
    chain: str,
    account_id: int,
    given: Iterable[Mapping[str, Any]],
    hash_at: Callable[[int], str | None],
    last_seq: int,
    public_keys: Mapping[str, str],
) -> Iterator[tuple[Mapping[str, Any], list[str] | None]]:
    """Hold a stored chain against every signed head of it: those this database kept, in seq
    order, then those `given` (as a tenant downloaded them); yield each head with what is
    wrong (`check_kept_head`; empty: it holds).

    `hash_at(seq)`: the stored entry's hash at a seq (None: none); `last_seq`: the stored
    chain's last. A given head of another chain or account is yielded with None, unchecked:
    whether that is an error is the caller's to say."""
    kept = SignedHead.objects.filter(chain=chain, account_id=account_id).order_by("seq")
    for head in itertools.chain((document(h) for h in kept), given):
        if head.get("chain") != chain or head.get("account_id") != account_id:
            yield head, None
            continue
        at = hash_at(int(head.get("seq") or 0))
        yield (
            head,
            check_kept_head(head, public_keys=public_keys, hash_at_seq=at, last_seq=last_seq),
        )
