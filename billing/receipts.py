"""Receipts: every charge proven, chained per account and signed with the operator's key.

A receipt is written in the transaction that moves the money it proves (the usage writer's
settlement, the reaper, reconciliation): a crash leaves both or neither. Its body is
canonical JSON (sorted keys, no spaces) naming the request, its attempts and who paid each,
tokens by kind, prices, bytes and the amounts; `hash` is the SHA-256 of those bytes and the
body carries the account's previous receipt's hash (`prev`) and its place in the chain
(`seq`), so a changed, missing or reordered receipt breaks the chain.

Signing is batched: an Ed25519 signature (over the 32 bytes of the hash) costs ~45 µs, so
only the last receipt an account gets in each batch is signed; through the chain it covers
every receipt before it. A batch's receipts share one `settled_at`, so the last receipt of
any period is a signed one: a period's statement is that signed head (`statement`).

Keys: TOLLGATE_RECEIPT_KEYS lists Ed25519 private keys newest first as
`id:base64url(32-byte seed)`, comma separated; new receipts are signed with the newest, and
the public part of every listed key is published (GET /api/receipts/keys), so receipts signed
before a rotation still verify.
"""

from __future__ import annotations

import base64
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.db import connection

from audit.heads import latest_or_sign, lock_sql
from audit.models import SignedHead
from billing.ledger.sql import GROUPS, batch_rows
from billing.models import Receipt
from billing.receipt_codec import pack, unpack
from billing.receipt_keys import receipt_keys
from core.sinks import rfc3339
from core.sqlexec import ALL, Program
from core.usage_record import UsageRecord

RECEIPTS = Receipt._meta.db_table
GENESIS = "0" * 64  # the `prev` of an account's first receipt
VERSION = 1

# ---------------------------------------------------------------- what a receipt says


def canonical(body: Mapping[str, Any]) -> bytes:
    """The bytes a receipt's hash covers: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def digest(body_bytes: bytes) -> str:
    return hashlib.sha256(body_bytes).hexdigest()


@dataclass(frozen=True, slots=True)
class Draft:
    """A receipt to append: the charge it proves and what the body says about the request."""

    account_id: int
    request_id: str
    kind: str  # Receipt.Kind
    group_id: int | None
    api_key_id: int | None
    cost_micro: int  # what the charge moved the group's settled cost by
    bandwidth_micro: int  # what it moved spent by on top (bandwidth)
    detail: dict[str, Any]
    # The wallet's side, which billing/receipt_ledger.py reconciles with the ledger: the
    # entries that moved its money for this receipt and their sum taken (negative: given
    # back; 0 and none for invoiced accounts and team-served requests), and the cost
    # measured above the hold that the wallet could not cover (stated, never charged).
    wallet_entries: tuple[int, ...] = ()
    wallet_taken_micro: int = 0
    uncollected_micro: int = 0


def request_detail(record: UsageRecord) -> dict[str, Any]:
    """What a receipt says about a stored request: each attempt (who paid it, and for the one
    that served, its tokens by kind, prices and amount), the bytes and the measured totals."""
    platform = record.served_by == "platform"
    tokens = {
        "input": record.tokens_in if platform else record.byok_tokens_in,
        "output": record.tokens_out if platform else record.byok_tokens_out,
        "cache_read": record.cache_read_tokens,
        "cache_write": record.cache_write_tokens,
        "reasoning": record.reasoning_tokens,
    }
    web_units = {
        "pages": record.web_pages,
        "rendered_pages": record.web_rendered_pages,
        "queries": record.web_queries,
    }
    served = [a.order for a in record.attempts if a.outcome == "ok"]
    return {
        "client_request_id": record.client_request_id,
        "created_at": rfc3339(record.created_at),
        "endpoint": record.endpoint,
        "model_requested": record.model_requested,
        "model_served": record.model_served,
        "provider": record.provider,
        "paid_by": record.served_by,
        "status": record.status,
        "error_code": record.error_code,
        "attempts": [
            {
                "order": a.order,
                "provider": a.provider,
                "model": a.model,
                "paid_by": a.served_by,
                "outcome": a.outcome,
                "upstream_status": a.upstream_status,
                **(
                    {
                        "tokens": tokens,
                        "web_units": web_units,
                        "prices": dict(record.prices),
                        "provider_cost_micro": record.provider_cost_micro,
                    }
                    if served and a.order == served[-1]
                    else {"provider_cost_micro": 0}
                ),
            }
            for a in record.attempts
        ],
        "tokens": tokens,
        "web_units": web_units,
        "prices": dict(record.prices),
        "bytes": {"in": record.bytes_in, "out": record.bytes_out},
        "measured": {
            "provider_cost_micro": record.provider_cost_micro,
            "bandwidth_micro": record.bandwidth_charge_micro,
        },
    }


# What a receipt adds to its account's running totals, and where its body states it: each
# body carries the totals of its chain up to and including itself (`running`), so a month's
# totals are two receipts apart (billing/statements.py).
RUNNING = (
    ("provider_cost_micro", ("amounts", "provider_cost_micro")),
    ("bandwidth_micro", ("amounts", "bandwidth_micro")),
    ("uncollected_micro", ("amounts", "uncollected_micro")),
    ("wallet_taken_micro", ("wallet", "taken_micro")),
)
NO_TOTALS = {name: 0 for name, _ in RUNNING}


def stated(body: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """What a body says at `path` (None where it says nothing)."""
    value: Any = body
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def own_amounts(body: Mapping[str, Any]) -> dict[str, int]:
    """What one receipt adds to the running totals."""
    return {name: int(stated(body, path) or 0) for name, path in RUNNING}


def running_totals(body: Mapping[str, Any] | None) -> dict[str, int] | None:
    """The running totals a body states (None: a receipt from before they were kept)."""
    if body is None:
        return dict(NO_TOTALS)
    running = body.get("running")
    if not isinstance(running, Mapping):
        return None
    return {name: int(running.get(name) or 0) for name, _ in RUNNING}


def _body(
    draft: Draft, *, seq: int, prev: str, settled_at: str, running: Mapping[str, int]
) -> dict[str, Any]:
    body = {
        **draft.detail,
        "v": VERSION,
        "account_id": draft.account_id,
        "seq": seq,
        "prev": prev,
        "request_id": draft.request_id,
        "kind": draft.kind,
        "group_id": draft.group_id,
        "api_key_id": draft.api_key_id,
        "settled_at": settled_at,
        "amounts": {
            "provider_cost_micro": draft.cost_micro,
            "bandwidth_micro": draft.bandwidth_micro,
            "total_micro": draft.cost_micro + draft.bandwidth_micro,
            "uncollected_micro": draft.uncollected_micro,
        },
        "wallet": {
            "ledger_entries": list(draft.wallet_entries),
            "taken_micro": draft.wallet_taken_micro,
        },
    }
    own = own_amounts(body)
    body["running"] = {name: running[name] + own[name] for name, _ in RUNNING}
    return body


def receipt_body(
    draft: Draft, *, seq: int, prev: str, settled_at: str, running: Mapping[str, int]
) -> dict[str, Any]:
    """Build the body `append` writes for `draft` as receipt `seq` of its chain, after the
    receipt hashed `prev`, settled at `settled_at` (RFC 3339) with the chain's `running`
    totals before it: for writers of chains outside a settlement (bench/scale.py's bulk load),
    so their receipts are the writer's own, byte for byte."""
    return _body(draft, seq=seq, prev=prev, settled_at=settled_at, running=running)


# ---------------------------------------------------------------- appending


_RECEIPT_COLUMNS = (
    "account_id, seq, request_id, kind, group_id, api_key_id, cost_micro, bandwidth_micro,"
    " body, hash, signature, key_id, settled_at"
)
_RECEIPT_TYPES = (
    "bigint", "bigint", "text", "text", "bigint", "bigint", "bigint", "bigint",
    "bytea", "bytea", "text", "text", "timestamptz",
)  # fmt: skip


def append(drafts: list[Draft], *, now: datetime) -> Program[int]:
    """Append receipts to their accounts' chains (in the caller's transaction); return how many.

    Each account's chain is locked (accounts in id order, so batches never deadlock; a
    transaction lock, since the application's role may not update a head row), the receipts
    hashed in order from its last one, and the last of each account signed: three statements
    and one signature per account, whatever the batch's size.
    """
    if not drafts:
        return 0
    by_account: dict[int, list[Draft]] = defaultdict(list)
    for draft in drafts:
        by_account[draft.account_id].append(draft)
    accounts = sorted(by_account)
    wanted, params = batch_rows(("bigint",), [(a,) for a in accounts])
    if connection.vendor == "postgresql":
        yield lock_sql(SignedHead.Chain.RECEIPTS, wanted), params
    heads = yield heads_of(wanted), params, ALL
    keys = receipt_keys()
    signer = keys.private[keys.newest]
    postgres = connection.vendor == "postgresql"
    settled_at = rfc3339(now)
    rows: list[tuple] = []
    for account_id, seq, head_digest, head_body in sorted(heads):
        seq, head = seq or 0, _hex(head_digest) if head_digest is not None else GENESIS
        previous = orjson.loads(unpack(head_body)) if head_body is not None else None
        running = running_totals(previous)
        if running is None:  # the first receipt since running totals are kept: sum once
            running = yield from _summed(account_id)
        chain = by_account[account_id]
        for n, draft in enumerate(chain, start=1):
            seq += 1
            body_dict = _body(draft, seq=seq, prev=head, settled_at=settled_at, running=running)
            running = body_dict["running"]
            body = canonical(body_dict)
            head = digest(body)
            signature = signer.sign(bytes.fromhex(head)).hex() if n == len(chain) else ""
            packed = pack(body.decode())
            rows.append(
                (
                    account_id, seq, draft.request_id, draft.kind, draft.group_id,
                    draft.api_key_id, draft.cost_micro, draft.bandwidth_micro,
                    "\\x" + packed.hex() if postgres else packed,
                    "\\x" + head if postgres else bytes.fromhex(head),
                    signature, keys.newest if signature else "", now,
                )
            )  # fmt: skip
    source, params = batch_rows(_RECEIPT_TYPES, rows)
    yield (f"INSERT INTO {RECEIPTS} ({_RECEIPT_COLUMNS}) SELECT * FROM ({source}) AS r", params)
    return len(rows)


def _hex(digest: Any) -> str:
    """A stored digest as hex (SQLite may hold one stored as text)."""
    return digest if isinstance(digest, str) else bytes(digest).hex()


def _summed(account_id: int) -> Program[dict[str, int]]:
    """An account's totals over every stored receipt (once, for a chain older than them)."""
    bodies = yield f"SELECT body FROM {RECEIPTS} WHERE account_id = %s", (account_id,), ALL
    totals = dict(NO_TOTALS)
    for (packed,) in bodies:
        own = own_amounts(orjson.loads(unpack(packed)))
        totals = {name: totals[name] + own[name] for name in totals}
    return totals


def heads_of(accounts_sql: str) -> str:
    """A query of each account's chain head (account_id, seq, hash, body: NULLs while it has
    no receipt) for the accounts a subquery names: one index probe each."""
    return (
        f"WITH wanted (a) AS ({accounts_sql})"
        f" SELECT wanted.a, r.seq, r.hash, r.body FROM wanted"
        f" LEFT JOIN {RECEIPTS} AS r ON r.account_id = wanted.a"
        f" AND r.seq = (SELECT MAX(seq) FROM {RECEIPTS} WHERE account_id = wanted.a)"
    )


def receipt_head(account_id: int) -> tuple[int, str]:
    """An account's chain head: its last receipt's seq and hash ((0, GENESIS) while empty)."""
    last = (
        Receipt.objects.filter(account_id=account_id)
        .order_by("-seq")
        .values_list("seq", "hash")
        .first()
    )
    return last if last is not None else (0, GENESIS)


def signed_receipt_head(account_id: int) -> SignedHead:
    """The account's receipt chain head, signed now, or the newest signature of it if no
    receipt joined since (audit/heads.py)."""
    seq, hash = receipt_head(account_id)
    return latest_or_sign(
        chain=SignedHead.Chain.RECEIPTS, account_id=account_id, seq=seq, hash=hash
    )


def accounts_of_groups(group_ids: Iterable[int]) -> Program[dict[int, int]]:
    """The account of each group (a reaper or reconciliation charge knows only the group)."""
    ids = sorted(set(group_ids))
    if not ids:
        return {}
    wanted, params = batch_rows(("bigint",), [(g,) for g in ids])
    rows = yield (
        f"SELECT id, account_id FROM {GROUPS} WHERE id IN (SELECT * FROM ({wanted}) AS g)",
        params,
        ALL,
    )
    return dict(rows)


# ---------------------------------------------------------------- verifying


@dataclass(frozen=True, slots=True)
class Problem:
    seq: int | None
    what: str

    def __str__(self) -> str:
        return f"receipt {self.seq}: {self.what}" if self.seq is not None else self.what


def verify_chain(
    receipts: Iterable[Mapping[str, Any]],
    public_keys: Mapping[str, str],
    *,
    head: tuple[int, str] | None = None,
) -> list[Problem]:
    """Check an account's receipts, in chain order; return what is wrong (nothing: valid).

    Each receipt: `body` (the canonical JSON text), `hash`, `signature`, `key_id`. Detects a
    changed body (its hash), a missing or reordered receipt (`seq` and `prev` must follow on),
    a forged or changed signature, and an unsigned tail (the last receipt must be signed).
    `head`: the chain's head (seq, hash) as its store says, to detect receipts cut off the end.
    The first receipt's `prev` is taken on trust (a listing may start mid-chain).
    """
    problems: list[Problem] = []
    last: tuple[int, str] | None = None
    signed = True
    for receipt in receipts:
        body_text = receipt["body"]
        body = orjson.loads(body_text)
        seq = body.get("seq")
        if digest(body_text.encode()) != receipt["hash"]:
            problems.append(Problem(seq, "its body does not match its hash (changed)"))
        if last is not None:
            if seq != last[0] + 1:
                problems.append(Problem(seq, f"follows receipt {last[0]} (missing or reordered)"))
            elif body.get("prev") != last[1]:
                problems.append(Problem(seq, "its prev is not the hash before it"))
        signature = receipt.get("signature") or ""
        if signature:
            problems += _check_signature(seq, receipt, public_keys)
        signed = bool(signature)
        last = (seq, receipt["hash"])
    if last is not None and not signed:
        problems.append(Problem(last[0], "the chain ends on an unsigned receipt"))
    if head is not None and last is not None and head[0] and (last[0], last[1]) != head:
        problems.append(Problem(head[0], f"the chain's head is receipt {head[0]}: cut off"))
    return problems


def _check_signature(
    seq: int | None, receipt: Mapping[str, Any], public_keys: Mapping[str, str]
) -> list[Problem]:
    encoded = public_keys.get(receipt.get("key_id") or "")
    if encoded is None:
        return [Problem(seq, f"signed with an unknown key {receipt.get('key_id')!r}")]
    raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(
            bytes.fromhex(receipt["signature"]), bytes.fromhex(receipt["hash"])
        )
    except (InvalidSignature, ValueError):
        return [Problem(seq, "its signature does not verify")]
    return []


def sign_statement(statement: dict[str, Any]) -> dict[str, Any]:
    """Sign a period's statement (its totals and its chain's signed head) with the newest key."""
    keys = receipt_keys()
    body = canonical(statement)
    return {
        **statement,
        "hash": digest(body),
        "key_id": keys.newest,
        "signature": keys.private[keys.newest].sign(bytes.fromhex(digest(body))).hex(),
    }


def verify_statement(signed: Mapping[str, Any], public_keys: Mapping[str, str]) -> list[Problem]:
    """Check a signed statement (sign_statement's answer) and its head's signature; return
    what is wrong (nothing: valid). The signature covers everything but hash, key_id and
    signature."""
    body = {k: v for k, v in signed.items() if k not in ("hash", "key_id", "signature")}
    if digest(canonical(body)) != signed.get("hash"):
        return [Problem(None, "the statement does not match its hash (changed)")]
    problems = [
        Problem(None, f"the statement: {p.what}")
        for p in _check_signature(None, signed, public_keys)
    ]
    head = signed.get("head")
    if isinstance(head, Mapping) and head.get("signature"):
        problems += _check_signature(head.get("seq"), head, public_keys)
    return problems
